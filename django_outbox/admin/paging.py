"""Paging the job list without counting a million rows.

Django's paginator counts every job the list matches (``SELECT COUNT(*)``), a scan of the table
or of an index at each request. Here the count stops at ``JobPaginator.count_limit``: a list
with more jobs pages through its first ``count_limit`` (the newest, at the default order), and
says about how many it holds: PostgreSQL's estimate for the query (its planner's, from the
table's statistics), or "more than" the limit where the database has none (SQLite).

On PostgreSQL the count also stops after ``count_time_limit`` seconds, for a filter no index
serves (a queue or task with few jobs among millions: the count reads the whole table to find
them), and the list shows the estimate instead.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import OperationalError, connections
from django.db.models import QuerySet
from django.utils.formats import number_format
from django.utils.translation import gettext

from ..db import reports_for
from ..db.time_limits import is_time_limit, query_time_limit


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """Return the database's estimate of the rows ``queryset`` matches, or None if it has none."""
    return reports_for(connections[queryset.db]).estimated_rows(queryset)


class JobPaginator(Paginator):  # type: ignore[type-arg]
    """Count up to ``count_limit`` jobs; past it, page through those and estimate the rest."""

    #: The most jobs counted exactly, and the most a list pages through.
    count_limit = 10_000

    #: Seconds the count may take on PostgreSQL before the list shows the estimate instead.
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
            # No estimate to fall back on (and no time limit that nests in a search's).
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
    def estimate(self) -> int | None:
        """How many jobs the list matches: exactly, estimated, or None (more than the limit)."""
        if self.exact:
            return self.counted
        estimate = estimated_rows(self.object_list)  # type: ignore[arg-type]
        if estimate is None:
            return None
        # The planner's statistics may lag: never less than what was counted.
        return max(estimate, self.counted or 1)

    @cached_property
    def count(self) -> int:
        """The jobs the pages hold: every one, or at most ``count_limit``."""
        if self.exact:
            return self.counted  # type: ignore[return-value]
        return self.count_limit if self.estimate is None else min(self.estimate, self.count_limit)


def count_text(paginator: Paginator) -> str:  # type: ignore[type-arg]
    """The number of jobs a list matches, as the list shows it: "12", "about 1,000,000"."""
    if not isinstance(paginator, JobPaginator) or paginator.exact:
        return number_format(paginator.count, force_grouping=True)
    if paginator.estimate is None:
        return gettext("more than %(count)s") % {
            "count": number_format(paginator.count_limit, force_grouping=True)
        }
    return gettext("about %(count)s") % {
        "count": number_format(paginator.estimate, force_grouping=True)
    }


class ShownCount(int):
    """A count that the admin's templates show as a text ("about 1,000,000").

    The changelist's templates print ``cl.result_count`` ("Select all 12 jobs", "12 jobs") and
    use it as a number (plural forms, comparisons). An int whose text is the estimate serves
    both, without copying the admin's templates (which change between Django versions).
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
        from django.utils.html import escape

        return str(escape(self.text))
