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
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..cron import CronStatus, schedule
from ..limits.usage import LimitUse, limit_usage
from ..models import Dashboard, Job, JobStatus
from ..stats.overview import COUNTS, DAY, HOUR, Activity, dashboard
from ..worker.registration import Registered
from .charts import activity_chart
from .times import duration_text

if TYPE_CHECKING:
    DashboardModelAdmin = admin.ModelAdmin[Dashboard]
else:
    # ModelAdmin is generic only in the type stubs.
    DashboardModelAdmin = admin.ModelAdmin


def _summary(activity: Activity) -> str:
    """``1,234 attempts (20.6/min), 2.1% failed``."""
    text = _("%(attempts)s attempts (%(rate)s/min)") % {
        "attempts": f"{activity.attempts:,}",
        "rate": f"{activity.per_minute:.1f}",
    }
    if activity.failure_rate is not None:
        text += _(", %(percent)s%% failed") % {"percent": f"{activity.failure_rate * 100:.1f}"}
    return str(text)


def _limit(use: LimitUse) -> dict[str, Any]:
    """A concurrency cap's or rate limit's row: its use now against it."""
    return {
        "kind": use.kind,
        "name": use.name,
        "key": use.key,
        "running": (
            f"{use.running:,} / {use.concurrency:,}" if use.concurrency is not None else ""
        ),
        "at_cap": use.at_cap,
        "rate": (
            f"{use.rate_limit} ({use.tokens or 0:.1f} {_('tokens left')})"
            if use.rate_limit is not None
            else ""
        ),
        "paused": duration_text(use.paused_seconds) if use.paused_seconds else "",
        "waiting": f"{use.waiting:,}",
    }


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
        info = f"{options.app_label}_{options.model_name}"
        return [
            path("", self.admin_site.admin_view(self.changelist_view), name=f"{info}_changelist"),
            # The page's live part alone, which its script fetches every REFRESH_SECONDS.
            path("live/", self.admin_site.admin_view(self.live_view), name=f"{info}_live"),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": _("Queue dashboard"),
            "subtitle": None,
            "opts": self.model._meta,
            # The charts want the page's width; and Django 6 marks breadcrumbs up as a list.
            "is_nav_sidebar_enabled": False,
            "ordered_breadcrumbs": django.VERSION >= (6, 0),
            "refresh_seconds": REFRESH_SECONDS,
            **live_context(),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/django_outbox/dashboard.html", context)

    def live_view(self, request: HttpRequest) -> HttpResponse:
        """The dashboard's figures alone (warnings, queues, tasks, workers, periodic tasks)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        # admin_view marks the response never to be cached.
        return TemplateResponse(request, "admin/django_outbox/dashboard_live.html", live_context())


#: Seconds between the dashboard's refreshes of its figures.
REFRESH_SECONDS = 10


def _counts(counts: dict[str, int], filters: dict[str, str]) -> list[dict[str, Any]]:
    """Each count with the query string of the job list it stands for."""
    return [
        {
            "name": name,
            "value": counts[name],
            "text": f"{counts[name]:,}",
            "query": urlencode({**filters, **COUNT_FILTERS[name]}),
        }
        for name in COUNTS
    ]


#: The job list's filters behind each count.
COUNT_FILTERS: dict[str, dict[str, str]] = {
    "failed": {"status__exact": JobStatus.FAILED.value},
    "due": {"waiting": "due"},
    "scheduled": {"waiting": "scheduled"},
    "running": {"status__exact": JobStatus.RUNNING.value},
    "halted": {"status__exact": JobStatus.HALTED.value},
}
#: The counts' column headings.
COUNT_LABELS = {
    "failed": gettext_lazy("Failed"),
    "due": gettext_lazy("Due"),
    "scheduled": gettext_lazy("Scheduled"),
    "running": gettext_lazy("Running"),
    "halted": gettext_lazy("Halted"),
}


def live_context() -> dict[str, Any]:
    """What the dashboard's live part shows, as of now."""
    figures = dashboard()
    queues = []
    for queue in figures.queues:
        hour, day = queue.activity[HOUR.name], queue.activity[DAY.name]
        hour_summary, day_summary = _summary(hour), _summary(day)
        queues.append(
            {
                "name": queue.name,
                "query": urlencode({"queue": queue.name}),
                "counts": _counts(queue.counts, {"queue": queue.name}),
                "oldest_due": duration_text(queue.oldest_due_age),
                "hour_summary": hour_summary,
                "day_summary": day_summary,
                "failing": bool(sum(hour.failed)),
                "hour_chart": activity_chart(
                    hour, label=f"{queue.name}, last hour: {hour_summary}"
                ),
                "day_chart": activity_chart(day, label=f"{queue.name}, last day: {day_summary}"),
            }
        )
    tasks = [
        {
            "name": task.name,
            "query": urlencode({"task_name": task.name}),
            "counts": _counts(task.counts, {"task_name": task.name}),
        }
        for task in figures.tasks
    ]
    live_workers = [_worker(worker) for worker in figures.live_workers]
    return {
        "job_opts": Job._meta,
        "now": figures.now,
        "count_labels": [COUNT_LABELS[name] for name in COUNTS],
        "queues": queues,
        "tasks": tasks,
        "live_workers": live_workers,
        "stale_workers": [_worker(worker) for worker in figures.stale_workers],
        "workers_in_error": [worker for worker in live_workers if worker["in_error"]],
        # No query without cron entries; two with.
        "cron_entries": [_cron_entry(status, figures.now) for status in schedule()],
        "limits": [_limit(use) for use in limit_usage()],
    }
