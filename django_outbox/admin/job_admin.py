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
from django.core.exceptions import PermissionDenied
from django.db import OperationalError, connections
from django.db.models import Q, QuerySet
from django.db.models.expressions import Combinable
from django.db.models.functions import Lower, Substr
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import format_lazy
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from .. import django_task_jobs
from ..conf import get_settings
from ..db import reports_for
from ..db.time_limits import is_time_limit, query_time_limit
from ..jobs.control import cancel_jobs, resume_jobs
from ..jobs.transitions import RETRYABLE, retry_failed
from ..models import CANCELLABLE, CLAIMABLE, FINISHED, Job, JobStatus
from . import bulk, history, job_views, times
from .error_search import error_search
from .filters import (
    QueueFilter,
    SchedulingFilter,
    StatusFilter,
    TaskFilter,
    WaitingFilter,
    listed_status,
    ordering_for,
    status_of,
)
from .paging import AFTER_VAR, Cursor, JobPaginator, Ordering, ShownCount, more_than_text
from .permissions import may_read_payload
from .summary import first_line, shown_error, summary_html, when_html

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
#: The parameter that puts a search the time limit stopped back in the search box.
STOPPED_SEARCH_VAR = "stopped_search"


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
#: How much of the last error the list reads: its first line is shown, this much on hover.
ERROR_HEAD_LENGTH = 500


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
        ordered_by = {str(field).lstrip("-") for field in jobs.query.order_by}
        if (
            "finished_at" in ordered_by
            and listed_status(request) in FINISHED
            and not reports_for(connections[jobs.db]).infers_partial_index_conditions
        ):
            # The condition of the (status, finished_at, id) index, which the status filter
            # implies: SQLite uses a partial index only for a query that repeats it.
            jobs = jobs.filter(status__in=FINISHED)
        return jobs

    def get_ordering_field(self, field_name: Any) -> Any:
        # Django hides the other columns' sort links (sortable_by) but still sorts by any column
        # a URL names (?o=2): that would sort the whole table.
        if field_name not in (self.sortable_by or ()):
            return None
        return super().get_ordering_field(field_name)

    #: Whether the list is paged by key (``?after=``): more jobs than the count counts.
    by_key = False
    #: The query string of the next page by key; None on the last page.
    next_page_query: str | None = None
    #: The query string of the list's first page (without ``?after=``).
    first_page_query = ""
    #: Whether this page is one after another (``?after=`` given).
    after_cursor = False

    def filter_bar(self) -> list[dict[str, Any]]:
        """The filters as the bar above the list shows them: each its title, its selected
        choice's text and its choices (the admin's column of filters beside the list left the
        list too little width for one line a job)."""
        bar = []
        for spec in self.filter_specs:
            choices = list(spec.choices(self))
            selected = next((choice for choice in choices if choice.get("selected")), None)
            bar.append(
                {
                    "title": spec.title,
                    "active": selected is not None and selected is not choices[0],
                    "selected": selected["display"] if selected else "",
                    "choices": choices,
                }
            )
        return bar

    def _get_default_ordering(self) -> list[str]:
        # What the column headers mark as the order: the admin's get_ordering(request), which
        # Django's ChangeList does not ask here.
        return ordering_for(status_of(self.filter_params.get("status__exact", [])))

    def get_filters_params(self, params: Any = None) -> dict[str, Any]:
        lookup_params: dict[str, Any] = super().get_filters_params(params)
        # The page's place, and a search the time limit stopped: not filters.
        lookup_params.pop(AFTER_VAR, None)
        lookup_params.pop(STOPPED_SEARCH_VAR, None)
        return lookup_params

    def get_query_string(self, new_params: Any = None, remove: Any = None) -> str:
        # A filter, a sort or a search link starts again at the first page.
        removed = [*(remove or ()), AFTER_VAR, STOPPED_SEARCH_VAR]
        return str(super().get_query_string(new_params, removed))

    @property
    def stopped_search(self) -> str:
        """The search the time limit stopped, put back in the search box (not run)."""
        values = self.filter_params.get(STOPPED_SEARCH_VAR) or [""]
        return str(values[-1])

    def get_results(self, request: HttpRequest) -> None:
        paginator = self.model_admin.get_paginator(request, self.queryset, self.list_per_page)
        assert isinstance(paginator, JobPaginator)
        ordering = Ordering.of(self.queryset)
        cursor = Cursor.decode(request.GET.get(AFTER_VAR, ""))
        self.first_page_query = self.get_query_string()
        if ordering is None or not (AFTER_VAR in request.GET or not paginator.exact):
            self._get_numbered_results(paginator)
            return
        # Paged by key: the page after the cursor, one job more to know if another page follows.
        jobs = self.queryset if cursor is None else self.queryset.filter(ordering.after(cursor))
        rows = list(jobs[: self.list_per_page + 1])
        full = len(rows) > self.list_per_page
        rows = rows[: self.list_per_page]
        if full:
            self.next_page_query = self.get_query_string(
                {AFTER_VAR: ordering.cursor(rows[-1]).encode()}
            )
        if paginator.exact:
            count = ShownCount(paginator.count, number_format(paginator.count, force_grouping=True))
        elif cursor is None and not full:
            # The count was stopped, but the first page holds every job.
            count = ShownCount(len(rows), number_format(len(rows), force_grouping=True))
        else:
            known = paginator.count_limit if paginator.counted is not None else len(rows)
            count = ShownCount(known + 1, more_than_text(known))
        self.by_key = True
        self.after_cursor = cursor is not None
        self.result_count = count
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.result_list = rows
        self.can_show_all = False
        self.multi_page = full or cursor is not None
        self.paginator = paginator

    def _get_numbered_results(self, paginator: JobPaginator) -> None:
        """Django's pages by number, for a list counted exactly: a page past the last (jobs
        deleted since the link was made) shows the last, keeping the search and filters."""
        result_count = paginator.count
        multi_page = result_count > self.list_per_page
        can_show_all = result_count <= self.list_max_show_all
        if (self.show_all and can_show_all) or not multi_page:
            result_list: Any = self.queryset._clone()
        else:
            self.page_num = min(max(self.page_num, 1), paginator.num_pages)
            result_list = paginator.page(self.page_num).object_list
        self.result_count = (
            result_count
            if paginator.exact
            else ShownCount(result_count, more_than_text(paginator.count_limit))
        )
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.result_list = result_list
        self.can_show_all = can_show_all
        self.multi_page = multi_page
        self.paginator = paginator


def _holds_nul(request: HttpRequest) -> bool:
    """Whether a query parameter of ``request`` (its name or a value) contains NUL."""
    return any(
        "\x00" in name or any("\x00" in value for value in values)
        for name, values in request.GET.lists()
    )


class JobAdmin(JobModelAdmin):
    # One line a job at 1280 px with the sidebar open: long texts are clipped (the whole in
    # their tooltip), times are relative with the clock time to the second beside them.
    list_display = (
        "id",
        "status_display",
        "task_display",
        "queue",
        "age_display",
        "attempts_display",
        "when_display",
        "last_error_short",
    )
    # Every choice is known without reading the table (admin_filters).
    list_filter = (
        ("status", StatusFilter),
        ("queue", QueueFilter),
        ("task_name", TaskFilter),
        WaitingFilter,
        SchedulingFilter,
    )
    # Facet counts would count every job of every choice at each request.
    show_facets = admin.ShowFacets.NEVER
    # Only columns an index orders the list by are sortable (get_sortable_by): the primary key,
    # and for a list of one finished status, when the jobs finished. Another column would sort
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
    # The page opens on its first screen (the summary line, the error, the actions:
    # first_screen.html); then what the job is, its history, its payload; what enqueue asked of
    # the scheduler folded away. Without the payload permission, get_fieldsets leaves out the
    # payload and shows the history without errors' details.
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
    readonly_fields = (*flatten_fieldsets(fieldsets), "history_without_details_display")

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        if may_read_payload(request):
            return self.fieldsets
        return [
            (name, {**options, "fields": [_without_details(str(f)) for f in options["fields"]]})
            for name, options in self.fieldsets
            if name != _("Payload")
        ]

    def get_list_display(self, request: HttpRequest) -> Any:
        if may_read_payload(request):
            return self.list_display
        # The error's first line without the start of the rest in its tooltip.
        return [
            "last_error_first_line" if name == "last_error_short" else name
            for name in self.list_display
        ]

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The admin log's messages hold payloads ("The payload before: ...").
        if not may_read_payload(request):
            raise PermissionDenied
        return super().history_view(request, object_id, extra_context)

    # Jobs change only through the queue's own transitions; the admin inspects and retries.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # The alias workers use, and the one search's time limit is set on.
        return super().get_queryset(request).using(get_settings().database)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_sortable_by(self, request: HttpRequest) -> tuple[str, ...]:
        if listed_status(request) in FINISHED:
            # (status, finished_at, id) and the failed jobs' (task or queue, finished_at, id).
            return ("id", "when_display")
        return ("id",)

    def get_ordering(self, request: HttpRequest) -> list[str | Combinable]:
        return [*ordering_for(listed_status(request))]

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
            # GET asks for confirmation.
            "cancel": ("cancel", job_views.cancel_view, False),
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
            readable = may_read_payload(request)
            context.update(
                outbox_can_act=self.has_change_permission(request, job),
                outbox_retryable=job.status in RETRYABLE,
                outbox_cancellable=job.status in CANCELLABLE
                or (job.status == JobStatus.RUNNING and not job.cancel_requested),
                outbox_may_read_payload=readable,
                outbox_summary=summary_html(job, timezone.now(), self.status_display(job)),
                outbox_error=shown_error(job, may_read_details=readable),
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
        # Django's action loads every job it deletes (to count them and to log each): the
        # columns its log entry names, not the rest.
        return delete_selected(self, request, queryset.only("pk", "task_name", "status"))

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
            if not text:
                return queryset, False
            return error_search(queryset, text, self.get_ordering(request)), False
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
            # The path lowered on both sides: MariaDB compares what it reads of JSON by its
            # bytes (utf8mb4_bin), where icontains would match only the case typed.
            queryset.alias(searched_django_task=Lower(django_task_jobs.path_expression())).filter(
                Q(task_name__icontains=term)
                | Q(searched_django_task__contains=term.lower())
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
            # Back to the list without running the search again, the filters kept and the
            # search put back in its box, to be narrowed.
            params = request.GET.copy()
            params[STOPPED_SEARCH_VAR] = params.pop(SEARCH_VAR)[-1]
            params.pop(AFTER_VAR, None)
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
            return format_html(
                '<span class="outbox-clip outbox-task" title="{}">{}</span>',
                job.task_name,
                job.task_name,
            )
        return format_html(
            '<span class="outbox-clip outbox-task" title="{}">{} '
            '<span class="outbox-django-task" title="{}">({})</span></span>',
            path,
            path,
            job.task_name,
            gettext("Django task"),
        )

    @admin.display(description=_("age"))
    def age_display(self, job: Job) -> str:
        """How long ago the job was enqueued; when, to the second, in the tooltip."""
        if job.enqueued_at is None:
            return "-"
        return format_html(
            '<time datetime="{}" title="{}">{}</time>',
            job.enqueued_at.isoformat(),
            times.full_text(job.enqueued_at),
            times.duration_text((timezone.now() - job.enqueued_at).total_seconds()),
        )

    @admin.display(description=_("when"), ordering="finished_at")
    def when_display(self, job: Job) -> SafeString:
        """What happened last or happens next, and when: "failed 4 min ago 14:03:27",
        "runs in 58 min", "started 12 s ago"."""
        return when_html(job, timezone.now())

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
        """The first line of the last error, clipped to the column; the start of the error
        (what the list reads of it) in the tooltip."""
        head = getattr(job, "last_error_head", None)
        text = (job.last_error if head is None else head).strip()
        if not text:
            return ""
        cut = head is not None and len(head) >= ERROR_HEAD_LENGTH
        return format_html(
            '<span class="outbox-clip outbox-error" title="{}{}">{}</span>',
            text,
            "…" if cut else "",
            first_line(text),
        )

    @admin.display(description=_("last error"))
    def last_error_first_line(self, job: Job) -> str:
        """The first line of the last error, clipped to the column, and nothing more."""
        head = getattr(job, "last_error_head", None)
        line = first_line(job.last_error if head is None else head)
        if not line:
            return ""
        return format_html(
            '<span class="outbox-clip outbox-error" title="{}">{}</span>', line, line
        )

    @admin.display(description=_("payload"))
    def payload_display(self, job: Job) -> str:
        return _json_block(job.payload)

    @admin.display(description=_("resumed with"))
    def resume_data_display(self, job: Job) -> str:
        return "-" if job.resume_data is None else _json_block(job.resume_data)

    @admin.display(description=_("returned"))
    def return_value_display(self, job: Job) -> str:
        return "-" if job.return_value is None else _json_block(job.return_value)

    @admin.display(description=_("history"))
    def history_display(self, job: Job) -> SafeString:
        """Every attempt (when, which worker, how long, which error) and operators' actions."""
        return history.render(history.history(job))

    @admin.display(description=_("history"))
    def history_without_details_display(self, job: Job) -> SafeString:
        """The history with each error's first line only, and operators' actions without the
        payloads they name."""
        return history.render(history.history(job, details=False))

    def _report(self, request: HttpRequest, count: int, message: Any, level: int) -> None:
        """Tell the user what an action did to ``count`` jobs, if it did anything.

        ``message``: ``ngettext_lazy(singular, plural, "count")``, so that makemessages finds
        both forms.
        """
        if count:
            self.message_user(request, message % {"count": count}, level)

    @admin.action(permissions=["change"], description=_("Retry selected failed or cancelled jobs"))
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> Any:
        if request.POST.get("select_across") == "1" and not bulk.confirmed(request):
            # Every failed job the list matches: perhaps thousands at once.
            return bulk.confirmation(
                self,
                request,
                queryset,
                title=gettext("Retry every job the list matches?"),
                consequence=gettext(
                    "Each failed or cancelled job among them will be ready to run now, with one "
                    "more attempt; the others are left as they are."
                ),
                button=gettext("Yes, retry them"),
            )
        selected = queryset.count()
        retried = bulk.act_in_chunks(queryset, Q(status__in=RETRYABLE), retry_failed)
        bulk.log_changes(request, retried, gettext("Retried."))
        self._report(
            request,
            len(retried),
            ngettext_lazy(
                "%(count)d job is ready to run again.",
                "%(count)d jobs are ready to run again.",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            selected - len(retried),
            ngettext_lazy(
                "%(count)d selected job was not retried: only failed or cancelled jobs can be.",
                "%(count)d selected jobs were not retried: only failed or cancelled jobs can be.",
                "count",
            ),
            messages.WARNING,
        )
        return None

    @admin.action(permissions=["change"], description=_("Cancel selected jobs…"))
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> Any:
        if not bulk.confirmed(request):
            return bulk.confirmation(
                self,
                request,
                queryset,
                title=gettext("Cancel the selected jobs?"),
                consequence=gettext(
                    "Jobs that wait will not run; running ones are asked to stop, and end as "
                    "cancelled at their worker's next heartbeat. Finished jobs are left as they "
                    "are."
                ),
                button=gettext("Yes, cancel them"),
            )
        selected = queryset.count()
        changed = bulk.act_in_chunks(
            queryset,
            Q(status__in=CANCELLABLE) | Q(status=JobStatus.RUNNING, cancel_requested=False),
            cancel_jobs,
        )
        cancelled = [job for job in changed if job.status != JobStatus.RUNNING]
        requested = [job for job in changed if job.status == JobStatus.RUNNING]
        bulk.log_changes(request, cancelled, gettext("Cancelled."))
        bulk.log_changes(request, requested, gettext("Asked the running job to stop."))
        self._report(
            request,
            len(cancelled),
            ngettext_lazy(
                "%(count)d job was cancelled: it will not run.",
                "%(count)d jobs were cancelled: they will not run.",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            len(requested),
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
            selected - len(changed),
            ngettext_lazy(
                "%(count)d selected job was not cancelled: it had finished, or was already asked "
                "to stop.",
                "%(count)d selected jobs were not cancelled: they had finished, or were already "
                "asked to stop.",
                "count",
            ),
            messages.WARNING,
        )
        return None

    @admin.action(permissions=["change"], description=_("Resume selected halted jobs"))
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        selected = queryset.count()
        resumed = bulk.act_in_chunks(queryset, Q(status=JobStatus.HALTED), resume_jobs)
        bulk.log_changes(request, resumed, gettext("Resumed without data."))
        self._report(
            request,
            len(resumed),
            ngettext_lazy(
                "%(count)d halted job is ready to run again (resumed without data).",
                "%(count)d halted jobs are ready to run again (resumed without data).",
                "count",
            ),
            messages.SUCCESS,
        )
        self._report(
            request,
            selected - len(resumed),
            ngettext_lazy(
                "%(count)d selected job was not resumed: only halted jobs can be.",
                "%(count)d selected jobs were not resumed: only halted jobs can be.",
                "count",
            ),
            messages.WARNING,
        )


def _without_details(field: str) -> str:
    return "history_without_details_display" if field == "history_display" else field


def _running_not_deleted(count: int) -> str:
    return ngettext_lazy(
        "%(count)d running job was not deleted: its worker holds it. Cancel it first, then "
        "delete it once it has ended.",
        "%(count)d running jobs were not deleted: their workers hold them. Cancel them first, "
        "then delete them once they have ended.",
        "count",
    ) % {"count": count}
