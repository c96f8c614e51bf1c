"""The admin: jobs with their errors and tracebacks; actions to retry, cancel and resume them.

Built to stay fast on a table of millions of jobs, some with megabytes of payload: filters whose
choices come from configuration (``admin_filters``), a bounded count (``admin_paging``), a
search that reads short columns (``JobAdmin.get_search_results``). See ``docs/admin.md``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.db import OperationalError
from django.db.models import Q, QuerySet
from django.db.models.functions import Substr
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator, format_lazy
from django.utils.timesince import timesince
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from .. import django_task_jobs
from ..conf import get_settings
from ..db.time_limits import is_time_limit, query_time_limit
from ..jobs.control import cancel_jobs, resume_jobs
from ..jobs.transitions import RETRYABLE, retry_failed
from ..models import CANCELLABLE, CLAIMABLE, Job, JobStatus
from . import history, job_views
from .filters import QueueFilter, SchedulingFilter, StatusFilter, TaskFilter
from .paging import JobPaginator, ShownCount, count_text

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


def _json_block(value: Any) -> str:
    """A JSON value, indented, escaped, in a <pre>."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html("<pre>{}</pre>", text)


#: Each status's colour in the list and on a job's page (the status is written out too).
STATUS_COLOURS = {
    JobStatus.READY: "#417690",
    JobStatus.RUNNING: "#1565c0",
    JobStatus.RETRYING: "#a15c00",
    JobStatus.SUCCEEDED: "#2e7d32",
    JobStatus.FAILED: "#c62828",
    JobStatus.HALTED: "#6a1b9a",
    JobStatus.CANCELLED: "#616161",
}
#: The most jobs the delete confirmation names (it counts the others).
DELETE_LISTED = 100
#: How much of the last error the list reads: its first line is shown.
ERROR_HEAD_LENGTH = 200


class JobChangeList(ChangeList):
    """The job list, which reads none of the long columns it does not show."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        # A payload or traceback may be megabytes; a page of 50 jobs must not fetch them. Of
        # the error, the start is enough for its first line.
        jobs: QuerySet[Job] = (
            super()
            .get_queryset(request, exclude_parameters)
            .defer(
                "payload",
                "last_traceback",
                "errors",
                "return_value",
                "resume_data",
                "context",
                "last_error",
            )
            .annotate(
                last_error_head=Substr("last_error", 1, ERROR_HEAD_LENGTH),
                # One key of a Django task's payload, read by the database: its task's path.
                django_task_path=django_task_jobs.path_expression(),
            )
        )
        return jobs

    def get_ordering_field(self, field_name: Any) -> Any:
        # Django hides the other columns' sort links (sortable_by) but still sorts by any column
        # a URL names (?o=2): that would sort the whole table.
        if field_name not in (self.sortable_by or ()):
            return None
        return super().get_ordering_field(field_name)

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        paginator = self.paginator
        if isinstance(paginator, JobPaginator) and not paginator.exact:
            # "about 1,000,000 jobs", "Select all about 1,000,000 jobs" in the templates.
            self.result_count = ShownCount(self.result_count, count_text(paginator))


def _holds_nul(request: HttpRequest) -> bool:
    """Whether a query parameter of ``request`` (its name or a value) contains NUL."""
    return any(
        "\x00" in name or any("\x00" in value for value in values)
        for name, values in request.GET.lists()
    )


class JobAdmin(JobModelAdmin):
    list_display = (
        "id",
        "task_display",
        "queue",
        "status_display",
        "age_display",
        "attempts_display",
        "run_at",
        "finished_at",
        "last_error_short",
    )
    # Every choice is known without reading the table (admin_filters).
    list_filter = (
        ("status", StatusFilter),
        ("queue", QueueFilter),
        ("task_name", TaskFilter),
        SchedulingFilter,
    )
    # Facet counts would count every job of every choice at each request.
    show_facets = admin.ShowFacets.NEVER
    # Only the primary key orders the list along an index; a sort by another column would sort
    # the whole table (the date hierarchy, which read enqueued_at's days, is gone for that too).
    sortable_by = ("id",)
    paginator = JobPaginator
    # Shown and documented; get_search_results decides what a search really runs.
    search_fields = ("=id", "task_name", "^queue", "^worker_id")
    search_help_text = format_lazy(
        _(
            "A job id, or part of a task name (a Django task's too), or the start of a queue "
            "or worker name. "
            "Type error: first to search error messages instead (slower), e.g. "
            "error:timed out; key: for the jobs of a lock, fair or unique key, e.g. "
            "key:tenant-7. At most {length} characters."
        ),
        length=SEARCH_MAX_LENGTH,
    )
    #: Seconds each query of a changelist that searches may run before it is stopped.
    search_time_limit = 5.0
    list_per_page = 50
    show_full_result_count = False
    actions = ("retry_selected", "cancel_selected", "resume_selected", "delete_selected")
    # What an operator reads first (status, error, history) at the top; what enqueue asked of
    # the scheduler folded away.
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "task_display",
                    "queue",
                    "status_display",
                    "age_display",
                    "attempts_display",
                    "priority",
                    "halt_reason",
                )
            },
        ),
        (_("Errors"), {"fields": ("last_error_display", "traceback_display")}),
        (_("History"), {"fields": ("history_display",)}),
        (
            _("Payload"),
            {"fields": ("payload_display", "resume_data_display", "return_value_display")},
        ),
        (
            _("Timing"),
            {"fields": ("enqueued_at", "run_at", "started_at", "finished_at", "lease_expires_at")},
        ),
        (_("Worker"), {"fields": ("worker_id", "lease_token")}),
        (
            _("Scheduling"),
            {
                "classes": ("collapse",),
                "fields": (
                    "dependencies_display",
                    "unique_key",
                    "lock_key",
                    "fair_key",
                    "fair_round",
                ),
            },
        ),
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

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # A running job's worker holds it: deleted under it, its attempt's work would be lost
        # without a trace. Cancel it first.
        if obj is not None and obj.status == JobStatus.RUNNING:
            return False
        return super().has_delete_permission(request, obj)

    def get_urls(self) -> list[URLPattern]:
        """The job page's own actions, before the admin's (whose catch-all would take them)."""
        return [*self.job_urls(), *super().get_urls()]

    def job_urls(self) -> list[URLPattern]:
        """URLs of views on one job: ``admin:django_outbox_job_<name>``, taking its id."""
        # name: (path segment, view, whether it takes POSTs only).
        views = {
            "edit_payload": ("edit-payload", job_views.edit_payload_view, False),
            "retry": ("retry", job_views.retry_view, True),
            "cancel": ("cancel", job_views.cancel_view, True),
        }
        info = (self.opts.app_label, self.opts.model_name)
        return [
            path(
                f"<path:object_id>/{segment}/",
                self.admin_site.admin_view(self._job_view(view, post_only)),
                name="{}_{}_".format(*info) + name,
            )
            for name, (segment, view, post_only) in views.items()
        ]

    def _job_view(self, view: Any, post_only: bool) -> Any:
        def bound(request: HttpRequest, object_id: str) -> HttpResponse:
            return view(self, request, object_id)  # type: ignore[no-any-return]

        return require_POST(bound) if post_only else bound

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The job's page; it saves nothing (jobs change through their actions only)."""
        if request.method == "POST":
            # Every field is read-only, but a save would still write the whole row back as
            # read at the request's start, over what a worker wrote meanwhile.
            self.message_user(
                request,
                gettext(
                    "Jobs are not edited on this page: use its actions (retry, cancel, edit "
                    "payload and retry). Nothing was saved."
                ),
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        job = self.get_object(request, unquote(object_id))
        context = {
            **(extra_context or {}),
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "show_save_as_new": False,
        }
        if job is not None:
            context.update(
                outbox_can_act=self.has_change_permission(request, job),
                outbox_retryable=job.status in RETRYABLE,
                outbox_cancellable=job.status in CANCELLABLE
                or (job.status == JobStatus.RUNNING and not job.cancel_requested),
            )
        return super().change_view(request, object_id, form_url, context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        job = self.get_object(request, unquote(object_id))
        if job is not None and job.status == JobStatus.RUNNING:
            self.message_user(request, _running_not_deleted(1), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:django_outbox_job_change", args=[job.pk]))
        return super().delete_view(request, object_id, extra_context)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """What the delete confirmation shows: the first jobs and how many, read through
        ``OUTBOX["DATABASE"]``.

        Django's own collects every related row on the router's database: a million rows for
        "select all", on a database the jobs may not be on. A job's only related rows are its
        dependencies, which go with it and which no admin user edits.
        """
        if isinstance(objs, QuerySet):
            count = objs.count()
            listed = list(objs[:DELETE_LISTED])
        else:
            listed = list(objs)
            count = len(listed)
        deletable: list[Any] = [str(job) for job in listed]
        if count > len(listed):
            deletable.append(gettext("... and %(count)d more") % {"count": count - len(listed)})
        perms_needed = set() if self.has_delete_permission(request) else {str(_("jobs"))}
        return deletable, {str(Job._meta.verbose_name_plural): count}, perms_needed, []

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        # Checked again as the rows are deleted: a job may have been claimed since the
        # confirmation page.
        queryset.exclude(status=JobStatus.RUNNING).delete()

    @admin.action(permissions=["delete"], description=_("Delete selected jobs"))
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> Any:
        """Django's delete action (its confirmation page, its counts), without running jobs."""
        from django.contrib.admin.actions import delete_selected

        running = queryset.filter(status=JobStatus.RUNNING).count()
        if running:
            self.message_user(request, _running_not_deleted(running), messages.WARNING)
            queryset = queryset.exclude(status=JobStatus.RUNNING)
            if not queryset.exists():
                return None
        return delete_selected(self, request, queryset)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Filter by a search that reads short columns only, unless it asks for errors.

        An integer is a job id (the primary key). Other text matches part of the task name (of
        a Django task's job: part of the Django task's path, one key of its payload) or the start
        of the queue or worker id: columns of at most 255 characters, so a search reads no other
        payload, no traceback or error message however large. ``error:TEXT`` matches part of
        ``last_error`` instead. Searches longer than ``SEARCH_MAX_LENGTH`` run no query.
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
            queryset.alias(searched_django_task=django_task_jobs.path_expression()).filter(
                Q(task_name__icontains=term)
                | Q(searched_django_task__icontains=term)
                | Q(queue__istartswith=term)
                | Q(worker_id__istartswith=term)
            ),
            False,
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if _holds_nul(request):
            # PostgreSQL's text cannot hold NUL: the filter's query would fail (a 500), and no
            # job can match it anyway. Other control characters are text like any other.
            return HttpResponseBadRequest(
                _("A filter or search of this list contains a NUL character; no job can match it.")
            )
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

    def action_checkbox(self, obj: Job) -> SafeString:
        """The admin's checkbox, written out: rendered as a form widget (a template per row)
        it took a fifth of the list's time."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            ACTION_CHECKBOX_NAME,
            obj.pk,
            format_html(gettext("Select this object for an action - {}"), str(obj)),
        )

    @admin.display(description=_("status"))
    def status_display(self, job: Job) -> SafeString:
        label = str(JobStatus(job.status).label) if job.status in JobStatus.values else job.status
        if job.cancel_requested and job.status == JobStatus.RUNNING:
            label = f"{label} ({gettext('cancel requested')})"
        elif job.has_dependencies and job.status in CLAIMABLE:
            label = f"{label} ({gettext('after its dependencies')})"
        return format_html(
            '<span class="outbox-status outbox-status-{}" style="color: #fff; background: {}; '
            'padding: 1px 7px; border-radius: 9px; white-space: nowrap">{}</span>',
            job.status,
            STATUS_COLOURS.get(job.status, "#616161"),  # type: ignore[call-overload]
            label,
        )

    @admin.display(description=_("task"))
    def task_display(self, job: Job) -> str:
        """The task's name; for a Django task's job, the Django task's path, marked so."""
        annotated = vars(job)
        if "django_task_path" in annotated:
            # The list: the path was read from the payload's key, the payload was not.
            path = annotated["django_task_path"]
        elif "payload" in job.get_deferred_fields():
            path = None
        else:
            path = django_task_jobs.path_of(job.task_name, job.payload)
        if not path:
            return job.task_name
        return format_html(
            '{} <span class="outbox-django-task" title="{}">({})</span>',
            path,
            job.task_name,
            gettext("Django task"),
        )

    @admin.display(description=_("age"))
    def age_display(self, job: Job) -> str:
        """How long ago the job was enqueued."""
        if job.enqueued_at is None:
            return "-"
        return timesince(job.enqueued_at, timezone.now(), depth=1)

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
        """The first line of the last error (the list reads only its start)."""
        head = getattr(job, "last_error_head", None)
        text = job.last_error if head is None else head
        first = text.strip().split("\n", 1)[0] if text else ""
        return Truncator(first).chars(100)

    @admin.display(description=_("last error"))
    def last_error_display(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", job.last_error) if job.last_error else "-"

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

    @admin.display(description=_("history"))
    def history_display(self, job: Job) -> SafeString:
        """Every attempt (when, which worker, how long, which error) and operators' actions."""
        return history.render(history.history(job))

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


def _running_not_deleted(count: int) -> str:
    return ngettext_lazy(
        "%(count)d running job was not deleted: its worker holds it. Cancel it first, then "
        "delete it once it has ended.",
        "%(count)d running jobs were not deleted: their workers hold them. Cancel them first, "
        "then delete them once they have ended.",
        "count",
    ) % {"count": count}
