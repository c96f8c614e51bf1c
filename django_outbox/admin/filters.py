"""The job list's filters: choices from configuration, never from scanning the job table.

Django's filter for a text column (``AllValuesFieldListFilter``) runs ``SELECT DISTINCT`` over the
whole table on every list request: 80 ms each for the queue and the task at 1,000,000 jobs on
PostgreSQL, more on SQLite. The queues and tasks a deployment has are known without reading a
row: ``OUTBOX["QUEUES"]``, the default queue, the task registry and the Django tasks declared for
the outbox backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import BooleanField, Field, Model, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .. import django_task_jobs
from ..conf import get_settings
from ..models import CLAIMABLE, FINISHED, PENDING, JobStatus
from ..tasks.registry import get_task, registered_names


def queue_choices() -> list[str]:
    """The queues the list offers: the default queue, ``OUTBOX["QUEUES"]`` and each
    registered task's queue, sorted."""
    outbox_settings = get_settings()
    queues = {outbox_settings.default_queue, *outbox_settings.queues}
    queues.update(get_task(name).queue for name in registered_names())
    return sorted(queues)


def task_choices() -> list[str]:
    """The task names the list offers: those registered in this process, sorted, then the paths
    of the Django tasks declared in this process (sorted)."""
    names = registered_names()
    return [*names, *(p for p in django_task_jobs.declared_paths() if p not in names)]


class KnownValuesFilter(admin.FieldListFilter):
    """A filter on a text column whose choices are given, not read from the table.

    The parameter is the column's name (``?queue=emails``), as Django's own filter for the column
    had it, so that links and bookmarks made before keep working. A value that is not among the
    choices (a queue since removed from the settings) still filters, and is shown selected.
    """

    def __init__(
        self,
        field: Field[Any, Any],
        request: HttpRequest,
        params: dict[str, Any],
        model: type[Model],
        model_admin: Any,
        field_path: str,
    ) -> None:
        self.lookup_kwarg = field_path
        value = params.get(field_path)
        # Django 5 passes each parameter's values as a list.
        self.lookup_val: str | None = value[-1] if isinstance(value, list) else value
        super().__init__(field, request, params, model, model_admin, field_path)

    def values(self) -> list[str]:
        raise NotImplementedError

    def display(self, value: str) -> str:
        """A choice's text (escaped by the template)."""
        return value

    def expected_parameters(self) -> list[str | None]:
        return [self.lookup_kwarg]

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        yield {
            "selected": self.lookup_val is None,
            "query_string": changelist.get_query_string(remove=[self.lookup_kwarg]),
            "display": _("All"),
        }
        values = self.values()
        if self.lookup_val is not None and self.lookup_val not in values:
            values = [*values, self.lookup_val]
        for value in values:
            yield {
                "selected": value == self.lookup_val,
                "query_string": changelist.get_query_string({self.lookup_kwarg: value}),
                # Escaped by the template, as every choice's display.
                "display": self.display(value),
            }


class QueueFilter(KnownValuesFilter):
    def values(self) -> list[str]:
        return queue_choices()


class TaskFilter(KnownValuesFilter):
    """Jobs by task name, or by the path of a Django task (a key of its jobs' payloads)."""

    def values(self) -> list[str]:
        return task_choices()

    def display(self, value: str) -> str:
        if self._is_django_task(value):
            return f"{value} ({_('Django task')})"
        return value

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.lookup_val is not None and self._is_django_task(self.lookup_val):
            return django_task_jobs.with_path(queryset, self.lookup_val)
        filtered = super().queryset(request, queryset)
        return queryset if filtered is None else filtered

    @staticmethod
    def _is_django_task(value: str) -> bool:
        # An outbox task of the same name wins: its jobs are found by the indexed column.
        return value in django_task_jobs.declared and value not in registered_names()


def _status_condition(statuses: tuple[str, ...]) -> RawSQL:
    """``status IN ('a', 'b')`` with the statuses written in the SQL, not passed as parameters.

    A partial index serves a query only if the database can tell from the query that the rows it
    wants are in the index; a PostgreSQL statement prepared once (psycopg's prepare_threshold)
    may be planned for any parameter. The statuses are the model's own constants, checked here,
    never user input.
    """
    from ..models import Job

    if not set(statuses) <= set(JobStatus.values):
        raise ValueError(f"Not statuses: {statuses!r}")
    # Unquoted: the name needs no quotes, and each database quotes differently.
    column = f"{Job._meta.db_table}.status"
    literals = ", ".join(f"'{status}'" for status in statuses)
    sql = f"{column} = {literals}" if len(statuses) == 1 else f"{column} IN ({literals})"
    return RawSQL(sql, (), output_field=BooleanField())


def status_conditions(status: str) -> list[RawSQL]:
    """The conditions that list the jobs of ``status`` along the index that serves them.

    - ready, retrying or halted: ``outbox_job_pending`` (status, id), the count and the page;
    - succeeded or cancelled: the count along ``outbox_job_finished``, the page along the
      primary key (newest first: a page of these is found at once);
    - failed: the count along ``outbox_job_failed_task`` or ``_queue`` (failed jobs only), the
      page along the primary key on PostgreSQL. Not ``outbox_job_finished``'s condition: SQLite
      would then read every failed job along it and sort them for one page (390 ms at 20,000
      failed jobs; 80 ms along the smaller failed-job index);
    - running: ``outbox_job_lease``, a few rows, sorted.
    """
    if status in PENDING:
        return [_status_condition((status,)), _status_condition(PENDING)]
    if status in (JobStatus.SUCCEEDED, JobStatus.CANCELLED):
        return [_status_condition((status,)), _status_condition(FINISHED)]
    return [_status_condition((status,))]


class StatusFilter(admin.ChoicesFieldListFilter):
    """Django's filter of the status choices, writing its condition as the index for the status
    needs it (``status_conditions``)."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        values = self.used_parameters.get(self.lookup_kwarg)
        if not isinstance(values, list) or len(values) != 1 or values[0] not in JobStatus.values:
            # No status, several, or one that is not (Django's filter says so).
            filtered = super().queryset(request, queryset)
            return queryset if filtered is None else filtered
        return queryset.filter(*status_conditions(values[0]))


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

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        condition = self.conditions.get(str(self.value()))
        return queryset if condition is None else queryset.filter(condition)


def listed_status(request: HttpRequest) -> str | None:
    """The one status the list is filtered by (``?status__exact=failed``), or None."""
    return status_of(request.GET.getlist("status__exact"))


def status_of(values: list[str]) -> str | None:
    """The status of the status filter's parameter values, if one."""
    if len(values) == 1 and values[0] in JobStatus.values:
        return values[0]
    return None


def ordering_for(status: str | None) -> list[str]:
    """The list's order when none is asked for: failed jobs by when they failed (an old job
    that fails again comes back to the top, not among the old ids), others newest first."""
    if status == JobStatus.FAILED:
        return ["-finished_at", "-id"]
    return ["-id"]


class WaitingFilter(admin.SimpleListFilter):
    """Ready or retrying jobs whose time has come (due), or has not (scheduled): the dashboard's
    "due" and "scheduled" counts link here."""

    title = _("waiting")
    parameter_name = "waiting"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("due", _("Due (to run now)")), ("scheduled", _("Scheduled (to run later)"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value not in ("due", "scheduled"):
            return queryset
        # The pending index's condition too (status, id): the page is read along it.
        waiting = queryset.filter(_status_condition(CLAIMABLE), _status_condition(PENDING))
        if value == "due":
            return waiting.filter(run_at__lte=Now())
        return waiting.filter(run_at__gt=Now())
