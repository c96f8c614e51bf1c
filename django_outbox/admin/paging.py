"""Paging the job list without counting a million rows, and without a wrong number.

Django's paginator counts every job the list matches (``SELECT COUNT(*)``), a scan of the table
or of an index at each request. Here the count stops at ``JobPaginator.count_limit``: a list with
fewer jobs is counted exactly and paged by number, as Django pages; a list with more says "more
than 10,000 jobs" (what is known, never an estimate) and pages by key instead: each page the jobs
after the previous page's last one in the list's order (``?after=``), a "Next" link while pages
are full. Such a page is read along the index that orders the list, so the millionth job is as
quick to reach as the first.

On PostgreSQL the count also stops after ``count_time_limit`` seconds, for a filter no index
serves (a search of error messages, a queue with few jobs among millions: the count reads the
whole table to find them); the list then says what its first page shows ("more than 50") and
pages by key.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import OperationalError, connections
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime
from django.utils.formats import number_format
from django.utils.html import escape
from django.utils.translation import gettext

from ..db import reports_for
from ..db.time_limits import is_time_limit, query_time_limit

#: The query parameter of a page by key: the previous page's last job, as ``Cursor.encode``s.
AFTER_VAR = "after"


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """Return the database's estimate of the rows ``queryset`` matches, or None if it has none."""
    return reports_for(connections[queryset.db]).estimated_rows(queryset)


class JobPaginator(Paginator):  # type: ignore[type-arg]
    """Count up to ``count_limit`` jobs; past it (or when the count is stopped), say so."""

    #: The most jobs counted exactly: a list with more is paged by key.
    count_limit = 10_000

    #: Seconds the count may take on PostgreSQL before the list is paged by key instead.
    count_time_limit = 0.05

    @cached_property
    def counted(self) -> int | None:
        """The jobs counted, up to ``count_limit + 1``; None if the count was stopped."""
        # No ORDER BY in the count: the database may then count along any index that serves the
        # filter, and stop at the limit.
        object_list: QuerySet[Any] = self.object_list  # type: ignore[assignment]
        # Only the key: a column the list annotates (the error's start) would make the count
        # read every row's.
        bounded = object_list.order_by().values("pk")[: self.count_limit + 1]
        if not reports_for(connections[bounded.db]).estimates_rows:
            # No time limit that nests in a search's (SQLite's is a progress handler).
            return int(bounded.count())
        try:
            with query_time_limit(bounded.db, self.count_time_limit):
                return int(bounded.count())
        except OperationalError as error:
            if not is_time_limit(error):
                raise
            return None

    @property
    def exact(self) -> bool:
        """Whether ``count`` is every job the list matches."""
        return self.counted is not None and self.counted <= self.count_limit

    @cached_property
    def count(self) -> int:
        """The jobs counted: every one, or ``count_limit`` (the list then pages by key)."""
        if self.exact:
            return self.counted  # type: ignore[return-value]
        return self.count_limit


def more_than_text(count: int) -> str:
    return gettext("more than %(count)s") % {"count": number_format(count, force_grouping=True)}


@dataclass(frozen=True)
class Ordering:
    """A list order that a page by key can follow: an optional column, then the id, each
    ascending or descending (Django adds the id descending to an order by a column)."""

    #: ``finished_at`` or None (the id alone).
    column: str | None
    descending: bool
    id_descending: bool

    @classmethod
    def of(cls, queryset: QuerySet[Any]) -> Ordering | None:
        """The order of ``queryset`` if pages by key can follow it, else None."""
        fields = [str(field) for field in queryset.query.order_by]
        keys: list[tuple[str, bool]] = []
        for field in fields:
            name = field.lstrip("-").replace("pk", "id")
            # A column named again (the default order after the one clicked) sorts nothing more.
            if name not in (key for key, _ in keys):
                keys.append((name, field.startswith("-")))
        if keys and keys[0][0] == "id":
            return cls(None, keys[0][1], keys[0][1])
        if len(keys) >= 2 and keys[0][0] == "finished_at" and keys[1][0] == "id":
            return cls("finished_at", keys[0][1], keys[1][1])
        return None

    def after(self, cursor: Cursor) -> Q:
        """The jobs after ``cursor`` in this order."""
        past_id = Q(**{f"pk__{'lt' if self.id_descending else 'gt'}": cursor.id})
        if self.column is None:
            return past_id
        if cursor.value is None:
            # A finished job without its time (none is written so): the ids that follow.
            return Q(**{f"{self.column}__isnull": True}) & past_id
        beyond, within = ("lt", "lte") if self.descending else ("gt", "gte")
        # The range first, so that the index's scan starts at the cursor; then the tie-break.
        return Q(**{f"{self.column}__{within}": cursor.value}) & (
            Q(**{f"{self.column}__{beyond}": cursor.value})
            | (Q(**{self.column: cursor.value}) & past_id)
        )

    def cursor(self, job: Any) -> Cursor:
        value = getattr(job, self.column) if self.column else None
        return Cursor(int(job.pk), value)


@dataclass(frozen=True)
class Cursor:
    """The last job of a page: its id, and its value of the ordering column if any."""

    id: int
    value: datetime.datetime | None = None

    def encode(self) -> str:
        return f"{self.id}" if self.value is None else f"{self.id}_{self.value.isoformat()}"

    @classmethod
    def decode(cls, text: str) -> Cursor | None:
        """The cursor ``text`` encodes, or None if it is not one (a hand-edited URL)."""
        key, _, value = text.partition("_")
        if not key.isdecimal() or int(key) >= 2**63:
            return None
        if not value:
            return cls(int(key))
        try:
            moment = parse_datetime(value)
        except ValueError:
            return None
        return None if moment is None else cls(int(key), moment)


class ShownCount(int):
    """A count that the admin's templates show as a text ("more than 10,000").

    The changelist's templates print ``cl.result_count`` ("12 jobs") and use it as a number
    (plural forms, comparisons). An int whose text is what is known serves both, without
    copying the admin's templates (which change between Django versions).
    """

    text: str

    def __new__(cls, value: int, text: str) -> ShownCount:
        count = super().__new__(cls, value)
        count.text = text
        return count

    def __str__(self) -> str:
        return self.text

    def __html__(self) -> str:
        # Django's number formatting marks an int safe as it is: the text is escaped here.
        return str(escape(self.text))
