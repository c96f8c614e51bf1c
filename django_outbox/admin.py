"""The admin: jobs with their errors and tracebacks, and a retry action for failed ones."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .models import Job
from .transitions import retry_failed

if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
else:
    # ModelAdmin is generic only in the type stubs.
    JobModelAdmin = admin.ModelAdmin


@admin.register(Job)
class JobAdmin(JobModelAdmin):
    list_display = (
        "id",
        "task_name",
        "queue",
        "status",
        "priority",
        "attempts_display",
        "run_at",
        "finished_at",
        "last_error_short",
    )
    list_filter = ("status", "queue", "task_name")
    search_fields = ("task_name", "queue", "last_error", "worker_id")
    search_help_text = _("Task, queue, worker or error text.")
    date_hierarchy = "enqueued_at"
    list_per_page = 50
    show_full_result_count = False
    actions = ("retry_selected",)
    fieldsets = (
        (None, {"fields": ("task_name", "queue", "status", "priority", "attempts_display")}),
        (_("Payload"), {"fields": ("payload_display",)}),
        (
            _("Timing"),
            {"fields": ("enqueued_at", "run_at", "started_at", "finished_at", "lease_expires_at")},
        ),
        (_("Worker"), {"fields": ("worker_id", "lease_token")}),
        (_("Errors"), {"fields": ("last_error", "traceback_display", "errors_display")}),
    )
    readonly_fields = (
        "task_name",
        "queue",
        "status",
        "priority",
        "attempts_display",
        "payload_display",
        "enqueued_at",
        "run_at",
        "started_at",
        "finished_at",
        "lease_expires_at",
        "worker_id",
        "lease_token",
        "last_error",
        "traceback_display",
        "errors_display",
    )

    # Jobs change only through the queue's own transitions; the admin inspects and retries.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description=_("attempts"))
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description=_("last error"))
    def last_error_short(self, job: Job) -> str:
        return Truncator(job.last_error).chars(80)

    @admin.display(description=_("payload"))
    def payload_display(self, job: Job) -> str:
        text = json.dumps(job.payload, indent=2, sort_keys=True, ensure_ascii=False)
        return format_html("<pre>{}</pre>", text)

    @admin.display(description=_("traceback"))
    def traceback_display(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", job.last_traceback) if job.last_traceback else "-"

    @admin.display(description=_("error history"))
    def errors_display(self, job: Job) -> str:
        if not job.errors:
            return "-"
        return format_html(
            "<table><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>{}</table>",
            _("attempt"),
            _("at"),
            _("worker"),
            _("error"),
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (entry.get("attempt"), entry.get("at"), entry.get("worker"), entry.get("error"))
                    for entry in job.errors
                ),
            ),
        )

    @admin.action(permissions=["change"], description=_("Retry selected failed jobs"))
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        selected = queryset.count()
        retried = retry_failed(queryset)
        if retried:
            self.message_user(
                request,
                ngettext(
                    "%(count)d failed job is ready to run again.",
                    "%(count)d failed jobs are ready to run again.",
                    retried,
                )
                % {"count": retried},
                messages.SUCCESS,
            )
        skipped = selected - retried
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected job was not retried: only failed jobs can be.",
                    "%(count)d selected jobs were not retried: only failed jobs can be.",
                    skipped,
                )
                % {"count": skipped},
                messages.WARNING,
            )
