"""The admin: jobs with their errors and tracebacks; actions to retry, cancel and resume them.

Its search is built to stay fast on a table of millions of jobs, some with megabytes of payload:
see ``JobAdmin.get_search_results`` and ``docs/admin.md``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.db import OperationalError, connections, transaction
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator, format_lazy
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from .conf import get_settings
from .control import cancel_jobs, resume_jobs
from .models import CLAIMABLE, Job, JobStatus
from .transitions import retry_failed

if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
else:
    # ModelAdmin is generic only in the type stubs.
    JobModelAdmin = admin.ModelAdmin

#: Longest search the changelist runs; a longer one is refused before any query.
SEARCH_MAX_LENGTH = 200
#: What makes a search look in error messages (``last_error``), which may be long.
ERROR_SEARCH_PREFIX = "error:"
#: What makes a search look for jobs with a key: a lock, fair or unique key, exactly.
KEY_SEARCH_PREFIX = "key:"
#: The largest id a search by id looks up (the column is a 64-bit integer).
ID_MAX = 2**63 - 1
# PostgreSQL's code for a statement cancelled by statement_timeout.
QUERY_CANCELED = "57014"


@contextmanager
def query_time_limit(using: str, seconds: float) -> Iterator[None]:
    """Stop any query on ``using`` that runs longer than ``seconds``, with OperationalError.

    PostgreSQL: ``statement_timeout`` for the length of a transaction (each query gets
    ``seconds``). SQLite: a progress handler that interrupts the running statement once
    ``seconds`` have passed since entry. Other databases: no limit.
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        with transaction.atomic(using=using):
            with connection.cursor() as cursor:
                # set_config(..., true) is SET LOCAL that takes a parameter: it ends with the
                # transaction, or with the savepoint when the request runs in ATOMIC_REQUESTS.
                cursor.execute("SELECT current_setting('statement_timeout')")
                previous = cursor.fetchone()[0]
                cursor.execute(
                    "SELECT set_config('statement_timeout', %s, true)", [f"{seconds * 1000:.0f}"]
                )
            yield
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])
    elif connection.vendor == "sqlite":
        connection.ensure_connection()
        raw = connection.connection
        deadline = time.monotonic() + seconds
        # Called every 10,000 virtual machine instructions; a true result interrupts.
        raw.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
        try:
            yield
        finally:
            raw.set_progress_handler(None, 0)
    else:
        yield


def is_time_limit(error: OperationalError) -> bool:
    """Return whether ``error`` is a query stopped by ``query_time_limit``."""
    cause = error.__cause__
    if isinstance(cause, sqlite3.OperationalError):
        return str(cause) == "interrupted"
    return getattr(cause, "sqlstate", None) == QUERY_CANCELED or (
        getattr(cause, "pgcode", None) == QUERY_CANCELED
    )


def _json_block(value: Any) -> str:
    """A JSON value, indented, escaped, in a <pre>."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html("<pre>{}</pre>", text)


class SchedulingFilter(admin.SimpleListFilter):
    """Jobs by what their enqueue asked of the scheduler (enqueue's keyword arguments)."""

    title = _("scheduling")
    parameter_name = "scheduling"
    conditions = {
        "lock": Q(lock_key__isnull=False),
        "fair": Q(fair_key__isnull=False),
        "dependencies": Q(has_dependencies=True),
        "dependents": Q(has_dependents=True),
        "unique": Q(unique_key__isnull=False),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("lock", _("With a lock key")),
            ("fair", _("With a fair key")),
            ("dependencies", _("Depending on other jobs")),
            ("dependents", _("Depended on by other jobs")),
            ("unique", _("With a unique key")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        condition = self.conditions.get(str(self.value()))
        return queryset if condition is None else queryset.filter(condition)


class JobChangeList(ChangeList):
    """The job list, which reads none of the columns it does not show."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        # A payload or traceback may be megabytes; a page of 50 jobs must not fetch them.
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer("payload", "last_traceback", "errors", "return_value", "resume_data", "context")
        )


@admin.register(Job)
class JobAdmin(JobModelAdmin):
    list_display = (
        "id",
        "task_name",
        "queue",
        "status_display",
        "priority",
        "attempts_display",
        "run_at",
        "finished_at",
        "last_error_short",
    )
    list_filter = ("status", "queue", "task_name", SchedulingFilter)
    # Shown and documented; get_search_results decides what a search really runs.
    search_fields = ("=id", "task_name", "^queue", "^worker_id")
    search_help_text = format_lazy(
        _(
            "A job id, or part of a task name, or the start of a queue or worker name. "
            "Type error: first to search error messages instead (slower), e.g. "
            "error:timed out; key: for the jobs of a lock, fair or unique key, e.g. "
            "key:tenant-7. At most {length} characters."
        ),
        length=SEARCH_MAX_LENGTH,
    )
    #: Seconds each query of a changelist that searches may run before it is stopped.
    search_time_limit = 5.0
    date_hierarchy = "enqueued_at"
    list_per_page = 50
    show_full_result_count = False
    actions = ("retry_selected", "cancel_selected", "resume_selected")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "task_name",
                    "queue",
                    "status_display",
                    "priority",
                    "attempts_display",
                    "dependencies_display",
                    "unique_key",
                    "lock_key",
                    "fair_key",
                    "fair_round",
                    "halt_reason",
                )
            },
        ),
        (
            _("Payload"),
            {"fields": ("payload_display", "resume_data_display", "return_value_display")},
        ),
        (
            _("Timing"),
            {"fields": ("enqueued_at", "run_at", "started_at", "finished_at", "lease_expires_at")},
        ),
        (_("Worker"), {"fields": ("worker_id", "lease_token")}),
        (_("Errors"), {"fields": ("last_error", "traceback_display", "errors_display")}),
    )
    # Every field shown is read-only: jobs change through the actions, never the form.
    readonly_fields = tuple(flatten_fieldsets(fieldsets))

    # Jobs change only through the queue's own transitions; the admin inspects and retries.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # The alias workers use, and the one search's time limit is set on.
        return super().get_queryset(request).using(get_settings().database)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Filter by a search that reads short columns only, unless it asks for errors.

        An integer is a job id (the primary key). Other text matches part of the task name or
        the start of the queue or worker id: columns of at most 255 characters, so a search
        reads no payload, traceback or error message however large. ``error:TEXT`` matches
        part of ``last_error`` instead. Searches longer than ``SEARCH_MAX_LENGTH`` run no query.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if len(term) > SEARCH_MAX_LENGTH:
            self.message_user(
                request,
                _(
                    "Searches are limited to %(limit)d characters; this one has %(length)d. "
                    "Nothing was searched."
                )
                % {"limit": SEARCH_MAX_LENGTH, "length": len(term)},
                messages.WARNING,
            )
            return queryset.none(), False
        if term[: len(ERROR_SEARCH_PREFIX)].lower() == ERROR_SEARCH_PREFIX:
            text = term[len(ERROR_SEARCH_PREFIX) :].strip()
            return (queryset.filter(last_error__icontains=text) if text else queryset), False
        if term[: len(KEY_SEARCH_PREFIX)].lower() == KEY_SEARCH_PREFIX:
            key = term[len(KEY_SEARCH_PREFIX) :].strip()
            if not key:
                return queryset, False
            return (
                queryset.filter(Q(lock_key=key) | Q(fair_key=key) | Q(unique_key=key)),
                False,
            )
        if term.isdecimal() and int(term) <= ID_MAX:
            return queryset.filter(pk=int(term)), False
        return (
            queryset.filter(
                Q(task_name__icontains=term)
                | Q(queue__istartswith=term)
                | Q(worker_id__istartswith=term)
            ),
            False,
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Only a search can make the list's queries slow enough to need a limit: without one,
        # a limit that fired would fire again on the page the user is sent back to.
        if request.method != "GET" or not request.GET.get(SEARCH_VAR, "").strip():
            return super().changelist_view(request, extra_context)
        using = get_settings().database
        try:
            with query_time_limit(using, self.search_time_limit):
                response = super().changelist_view(request, extra_context)
                # The result list is a lazy queryset: render now, under the limit.
                if isinstance(response, TemplateResponse):
                    response.render()
        except OperationalError as error:
            if not is_time_limit(error):
                raise
            self.message_user(
                request,
                _(
                    "The search was stopped after %(seconds)g seconds. Search by id, task, "
                    "queue or worker, or filter by status first."
                )
                % {"seconds": self.search_time_limit},
                messages.ERROR,
            )
            params = request.GET.copy()
            del params[SEARCH_VAR]
            return HttpResponseRedirect(f"{request.path}?{params.urlencode()}")
        return response

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, job: Job) -> str:
        label = str(JobStatus(job.status).label) if job.status in JobStatus.values else job.status
        if job.cancel_requested and job.status == JobStatus.RUNNING:
            return f"{label} ({gettext('cancel requested')})"
        if job.has_dependencies and job.status in CLAIMABLE:
            return f"{label} ({gettext('after its dependencies')})"
        return label

    @admin.display(description=_("depends on"))
    def dependencies_display(self, job: Job) -> str:
        parents = (
            Job.objects.using(job._state.db)
            .filter(dependents__job=job)
            .order_by("pk")
            .values_list("pk", "status")
        )
        listed = dict(parents)
        missing = [
            pk
            for pk in job.dependencies.values_list("depends_on_id", flat=True)
            if pk not in listed
        ]
        if not listed and not missing:
            return "-"
        return format_html_join(
            ", ",
            "#{} ({})",
            [*listed.items(), *((pk, gettext("deleted")) for pk in missing)],
        )

    @admin.display(description=_("attempts"))
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description=_("last error"))
    def last_error_short(self, job: Job) -> str:
        return Truncator(job.last_error).chars(80)

    @admin.display(description=_("payload"))
    def payload_display(self, job: Job) -> str:
        return _json_block(job.payload)

    @admin.display(description=_("resumed with"))
    def resume_data_display(self, job: Job) -> str:
        return "-" if job.resume_data is None else _json_block(job.resume_data)

    @admin.display(description=_("returned"))
    def return_value_display(self, job: Job) -> str:
        return "-" if job.return_value is None else _json_block(job.return_value)

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

    def _report(self, request: HttpRequest, count: int, message: Any, level: int) -> None:
        """Tell the user what an action did to ``count`` jobs, if it did anything.

        ``message``: ``ngettext_lazy(singular, plural, "count")``, so that makemessages finds
        both forms.
        """
        if count:
            self.message_user(request, message % {"count": count}, level)

    @admin.action(permissions=["change"], description=_("Retry selected failed or cancelled jobs"))
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        selected = queryset.count()
        retried = retry_failed(queryset)
        self._report(
            request,
            retried,
            ngettext_lazy(
                "%(count)d job is ready to run again.",
                "%(count)d jobs are ready to run again.",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            selected - retried,
            ngettext_lazy(
                "%(count)d selected job was not retried: only failed or cancelled jobs can be.",
                "%(count)d selected jobs were not retried: only failed or cancelled jobs can be.",
                "count",
            ),
            messages.WARNING,
        )

    @admin.action(permissions=["change"], description=_("Cancel selected jobs"))
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        selected = queryset.count()
        cancelled, requested = cancel_jobs(queryset)
        self._report(
            request,
            cancelled,
            ngettext_lazy(
                "%(count)d job was cancelled: it will not run.",
                "%(count)d jobs were cancelled: they will not run.",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            requested,
            ngettext_lazy(
                "%(count)d running job was asked to stop; it ends as cancelled when its worker "
                "sees the request (at its next heartbeat).",
                "%(count)d running jobs were asked to stop; they end as cancelled when their "
                "workers see the request (at their next heartbeat).",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            selected - cancelled - requested,
            ngettext_lazy(
                "%(count)d selected job was not cancelled: it had finished, or was already asked "
                "to stop.",
                "%(count)d selected jobs were not cancelled: they had finished, or were already "
                "asked to stop.",
                "count",
            ),
            messages.WARNING,
        )

    @admin.action(permissions=["change"], description=_("Resume selected halted jobs"))
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        selected = queryset.count()
        resumed = resume_jobs(queryset)
        self._report(
            request,
            resumed,
            ngettext_lazy(
                "%(count)d halted job is ready to run again (resumed without data).",
                "%(count)d halted jobs are ready to run again (resumed without data).",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            selected - resumed,
            ngettext_lazy(
                "%(count)d selected job was not resumed: only halted jobs can be.",
                "%(count)d selected jobs were not resumed: only halted jobs can be.",
                "count",
            ),
            messages.WARNING,
        )


# The dashboard registers its own admin (a page of its own, beside the job list).
from . import dashboard_admin  # noqa: E402, F401
