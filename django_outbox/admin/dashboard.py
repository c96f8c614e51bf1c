"""The dashboard's page in the admin: a proxy model's changelist, so it has its line in the admin
index, shown to staff who may view jobs. ``django_outbox.admin`` registers it.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import django
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext as _

from ..cron import CronStatus, schedule
from ..models import Dashboard, Job, JobStatus
from ..stats.overview import DAY, DEPTH_STATUSES, HOUR, Activity, dashboard
from ..worker.registration import Registered
from .charts import activity_chart

if TYPE_CHECKING:
    DashboardModelAdmin = admin.ModelAdmin[Dashboard]
else:
    # ModelAdmin is generic only in the type stubs.
    DashboardModelAdmin = admin.ModelAdmin


def duration_text(seconds: float | None) -> str:
    """``42 s``, ``7 min``, ``3 h 5 min``, ``2 d 4 h``; an empty string for None."""
    if seconds is None:
        return ""
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h"


def _summary(activity: Activity) -> str:
    """``1,234 attempts (20.6/min), 2.1% failed``."""
    text = _("%(attempts)s attempts (%(rate)s/min)") % {
        "attempts": f"{activity.attempts:,}",
        "rate": f"{activity.per_minute:.1f}",
    }
    if activity.failure_rate is not None:
        text += _(", %(percent)s%% failed") % {"percent": f"{activity.failure_rate * 100:.1f}"}
    return str(text)


def _cron_entry(status: CronStatus, now: datetime.datetime) -> dict[str, Any]:
    last_status = status.last_job_status
    return {
        "name": status.name,
        "task": status.task,
        "expression": status.expression,
        "description": status.description,
        "timezone": status.timezone,
        "next_run": status.next_run,
        "next_in": (
            duration_text(max(0.0, (status.next_run - now).total_seconds()))
            if status.next_run
            else ""
        ),
        "last_run": status.last_run,
        "last_ago": (
            duration_text(max(0.0, (now - status.last_run).total_seconds()))
            if status.last_run
            else ""
        ),
        "last_job_id": status.last_job_id,
        "last_job_status": JobStatus(last_status).label if last_status in JobStatus.values else "",
        "last_job_failed": last_status == JobStatus.FAILED,
    }


def _worker(worker: Registered) -> dict[str, Any]:
    row = worker.row
    if worker.stale:
        state = _("stale: no heartbeat for %(age)s") % {"age": duration_text(worker.heartbeat_age)}
    elif worker.late:
        state = _("heartbeat late: last %(age)s ago") % {"age": duration_text(worker.heartbeat_age)}
    elif worker.in_error_for is not None:
        state = _("in error for %(age)s") % {"age": duration_text(worker.in_error_for)}
    else:
        state = _("OK")
    return {
        "id": row.worker_id,
        "host": row.host,
        "pid": row.pid,
        "queues": ", ".join(row.queues) or _("every queue"),
        "concurrency": row.concurrency,
        "started_at": row.started_at,
        "running_for": duration_text(worker.running_for),
        "heartbeat_age": duration_text(worker.heartbeat_age),
        "jobs_done_text": f"{row.jobs_done:,}",
        "jobs_failed": row.jobs_failed,
        "jobs_failed_text": f"{row.jobs_failed:,}",
        "state": state,
        "healthy": worker.healthy,
        "in_error": worker.in_error_for is not None or worker.late,
        "last_error": row.last_error,
        "last_error_at": row.last_error_at,
    }


class DashboardAdmin(DashboardModelAdmin):
    """Shows the dashboard in place of a changelist; nothing to add, change or delete."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        options = Job._meta
        return request.user.has_perm(f"{options.app_label}.view_{options.model_name}")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        options = self.model._meta
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name=f"{options.app_label}_{options.model_name}_changelist",
            )
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        figures = dashboard()
        queues = []
        for queue in figures.queues:
            hour, day = queue.activity[HOUR.name], queue.activity[DAY.name]
            queues.append(
                {
                    "name": queue.name,
                    "depth": [f"{queue.depth[status]:,}" for status in DEPTH_STATUSES],
                    "oldest_due": duration_text(queue.oldest_due_age),
                    "hour_summary": _summary(hour),
                    "day_summary": _summary(day),
                    "failing": bool(sum(hour.failed)),
                    "hour_chart": activity_chart(hour, label=f"{queue.name}: last hour"),
                    "day_chart": activity_chart(day, label=f"{queue.name}: last day"),
                }
            )
        context = {
            **self.admin_site.each_context(request),
            "title": _("Queue dashboard"),
            "subtitle": None,
            "opts": self.model._meta,
            # The charts want the page's width; and Django 6 marks breadcrumbs up as a list.
            "is_nav_sidebar_enabled": False,
            "ordered_breadcrumbs": django.VERSION >= (6, 0),
            "job_opts": Job._meta,
            "now": figures.now,
            "statuses": [status.label for status in DEPTH_STATUSES],
            "queues": queues,
            "live_workers": [_worker(worker) for worker in figures.live_workers],
            "stale_workers": [_worker(worker) for worker in figures.stale_workers],
            # No query without cron entries; two with.
            "cron_entries": [_cron_entry(status, figures.now) for status in schedule()],
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/django_outbox/dashboard.html", context)
