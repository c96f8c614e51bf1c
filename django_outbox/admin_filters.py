"""The job list's filters: choices from configuration, never from scanning the job table.

Django's filter for a text column (``AllValuesFieldListFilter``) runs ``SELECT DISTINCT`` over the
whole table on every list request: 80 ms each for the queue and the task at 1,000,000 jobs on
PostgreSQL, more on SQLite. The queues and tasks a deployment has are known without reading a
row: ``OUTBOX["QUEUES"]``, the default queue and the task registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Field, Model, Q, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .conf import get_settings
from .models import FINISHED, PENDING
from .registry import get_task, registered_names


def queue_choices() -> list[str]:
    """The queues the list offers: the default queue, ``OUTBOX["QUEUES"]`` and each
    registered task's queue, sorted."""
    outbox_settings = get_settings()
    queues = {outbox_settings.default_queue, *outbox_settings.queues}
    queues.update(get_task(name).queue for name in registered_names())
    return sorted(queues)


def task_choices() -> list[str]:
    """The task names the list offers: those registered in this process, sorted."""
    return registered_names()


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
                "display": value,
            }


class QueueFilter(KnownValuesFilter):
    def values(self) -> list[str]:
        return queue_choices()


class TaskFilter(KnownValuesFilter):
    def values(self) -> list[str]:
        return task_choices()


class StatusFilter(admin.ChoicesFieldListFilter):
    """Django's filter of the status choices, with the condition of the index for the status.

    A status is listed along a partial index: ``outbox_job_pending`` (ready, retrying, halted),
    ``outbox_job_lease`` (running), ``outbox_job_finished`` (the others). PostgreSQL proves that
    ``status = 'halted'`` implies an index's ``status IN (...)``; SQLite uses a partial index
    only when the query states its condition, which this filter adds.
    """

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        filtered = super().queryset(request, queryset)
        if filtered is None:
            return queryset
        values = self.used_parameters.get(self.lookup_kwarg)
        chosen = set(values) if isinstance(values, list) else set()
        for statuses in (PENDING, FINISHED):
            if chosen and chosen <= set(statuses):
                return filtered.filter(status__in=statuses)
        # Running: the lease index's condition is the filter itself.
        return filtered


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
