"""Which rows a figure of ``django_outbox.stats`` reads: all of them, or a sample.

A figure over at most ``EXACT_LIMIT`` jobs reads them all along an index and is exact. Over
more, reading them all costs what the table holds (a million jobs: a second), so the figure
reads a sample instead: the window of ``finished_at`` is cut into ``SLICES`` equal slices and
each gives its first ``PER_SLICE`` jobs along ``outbox_job_finished`` (status, finished_at).
Each slice is one short index range scan, so a sample costs the same at a million jobs as at
a billion. The count of the rows sampled is estimated (PostgreSQL's planner, which reads the
index's ends for ranges past its statistics; SQLite counts along the index).

The sample is spread evenly over time, not over jobs: a busy stretch of the window gives no
more jobs to it than a quiet one, which is what a dashboard of the last hour wants to see,
and is said in the docs.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..db import reports_for
from ..models import Job

#: Up to this many jobs, a figure reads every one (exact); beyond, a sample.
EXACT_LIMIT = 10_000
#: The sample: the window cut into SLICES slices, the first PER_SLICE jobs of each.
SLICES = 100
PER_SLICE = 100
#: The end of the last slice (in UTC, or local time without USE_TZ: see _as_datetime).
FAR_FUTURE = datetime.datetime(9999, 12, 30)


@dataclass(frozen=True)
class Rows:
    """The rows a figure reads: ``sql`` (a SELECT of the columns asked for) and ``params``."""

    sql: str
    params: list[Any]
    # A sample's: how many jobs match, estimated. None: ``sql`` returns every one.
    estimated_count: int | None = None

    @property
    def sampled(self) -> bool:
        return self.estimated_count is not None

    def scale(self, sample_size: int) -> float:
        """What one row of a sample of ``sample_size`` stands for (1 for every row)."""
        if self.estimated_count is None or not sample_size:
            return 1.0
        # A sample never holds more jobs than exist: an estimate below its size is wrong.
        return max(self.estimated_count, sample_size) / sample_size


def where_of(jobs: Any) -> tuple[str, list[Any]]:
    """The WHERE clause of ``jobs``' query, and its parameters, for raw SQL around it."""
    compiler = jobs.query.get_compiler(using=jobs.db)
    where, params = compiler.compile(jobs.query.where)
    return where, list(params)


def rows_of(
    jobs: Any,
    columns: str,
    *,
    index: str,
    since: datetime.datetime | None = None,
    exact: bool = False,
) -> Rows:
    """Return the rows of ``jobs`` (jobs of one status, a QuerySet) to aggregate.

    ``columns``: the SELECT list (plain column names or expressions of them). ``index``: the
    condition of the partial index to read them along (``index_condition``). ``since``: the
    start of the window of ``finished_at`` to read (``jobs`` must not filter on it). With
    ``exact``, or when there are at most ``EXACT_LIMIT`` such jobs, every row; else a sample of
    finished jobs (sampled along ``finished_at``).
    """
    connection = connections[jobs.db]
    table = connection.ops.quote_name(Job._meta.db_table)
    where, params = where_of(jobs)
    # After the ORM's terms: SQLite reads the first term on the indexed column as the key.
    where = f"{where} AND {index}"
    # The window's start is the slices' business in a sample: two lower bounds on one column
    # make SQLite start its range at the one it picks, the window's, for every slice.
    in_window, window_params = where, params
    if since is not None:
        in_window = f"{where} AND finished_at >= %s"
        window_params = [*params, connection.ops.adapt_datetimefield_value(since)]
    every_row = f"SELECT {columns} FROM {table} WHERE {in_window}"
    if exact:
        return Rows(every_row, window_params)
    with connection.cursor() as cursor:
        # Along the index, and no further than one past the limit.
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {in_window} LIMIT %s) AS capped",
            [*window_params, EXACT_LIMIT + 1],
        )
        if cursor.fetchone()[0] <= EXACT_LIMIT:
            return Rows(every_row, window_params)
        start = (
            _as_datetime(since)
            if since
            else _first_finished(cursor, table, in_window, window_params)
        )
        end = _last_finished(cursor, table, in_window, window_params)
        count = _estimated_count(connection, cursor, table, in_window, window_params)
    sql, sample_params = _sample_sql(connection, table, columns, where, params, start, end)
    return Rows(sql, sample_params, estimated_count=count)


def _first_finished(cursor: Any, table: str, where: str, params: list[Any]) -> Any:
    cursor.execute(
        f"SELECT finished_at FROM {table} WHERE {where} ORDER BY finished_at LIMIT 1", params
    )
    return _as_datetime(cursor.fetchone()[0])


def _last_finished(cursor: Any, table: str, where: str, params: list[Any]) -> Any:
    cursor.execute(
        f"SELECT finished_at FROM {table} WHERE {where} ORDER BY finished_at DESC LIMIT 1",
        params,
    )
    return _as_datetime(cursor.fetchone()[0])


def _as_datetime(value: Any) -> datetime.datetime:
    """``value`` (a datetime, or SQLite's text) as the ORM would return it: aware in UTC with
    ``USE_TZ``, naive local time without."""
    moment = value if isinstance(value, datetime.datetime) else None
    if moment is None:
        moment = datetime.datetime.fromisoformat(str(value))
    if settings.USE_TZ:
        # PostgreSQL returns an aware datetime; SQLite a naive one in UTC.
        return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
    return timezone.make_naive(moment) if moment.tzinfo else moment


def _sample_sql(
    connection: BaseDatabaseWrapper,
    table: str,
    columns: str,
    where: str,
    params: list[Any],
    start: datetime.datetime,
    end: datetime.datetime,
) -> tuple[str, list[Any]]:
    """The first PER_SLICE rows of each of SLICES equal slices of [start, end]."""
    step = (end - start) / SLICES
    lows = [start + step * number for number in range(SLICES)]
    # The last slice is open: rows finished since ``end`` was read belong to it.
    highs = [*lows[1:], _as_datetime(FAR_FUTURE)]
    if step <= datetime.timedelta(0):
        # Every row at one instant: one slice holds them all.
        lows, highs = [start], [_as_datetime(FAR_FUTURE)]
    one_slice = (
        f"SELECT {columns} FROM {table} WHERE {where} AND finished_at >= {{low}} "
        f"AND finished_at < {{high}} ORDER BY finished_at LIMIT {PER_SLICE}"
    )
    return reports_for(connection).slices_sql(connection, one_slice, params, lows, highs)


def _estimated_count(
    connection: BaseDatabaseWrapper, cursor: Any, table: str, where: str, params: list[Any]
) -> int:
    """How many rows match ``where``: the database's estimate, or its count."""
    return reports_for(connection).estimated_count(cursor, table, where, params)
