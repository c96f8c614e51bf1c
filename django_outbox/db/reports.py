"""What the statistics, the admin's lists and the health probes read, where databases differ.

``reports_for(connection)`` (in ``db``) returns one ``DatabaseReports`` per database, as
``queries_for`` does for the worker's statements. These reads are for people: none of them is on
a job's path.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet


@dataclass(frozen=True)
class Durations:
    """How long some jobs ran, in seconds: ``percentiles`` in the order asked (empty without
    jobs)."""

    count: int
    average: float | None
    shortest: float | None
    longest: float | None
    percentiles: list[float]


@dataclass(frozen=True)
class OpenTransaction:
    """The oldest transaction open in another session: its age and who holds it."""

    age: float
    holder: str


@dataclass(frozen=True)
class DeadRows:
    """A table's rows that wait for vacuum, beside its live ones."""

    live: int
    dead: int
    #: Seconds since the table was last vacuumed; None if it never was.
    vacuumed_ago: float | None


@dataclass(frozen=True)
class LockWait:
    """A session of a worker waiting for a lock: what it waits for, how long, on what."""

    application_name: str
    #: The wait event, as "type/event" (PostgreSQL's ``wait_event_type``/``wait_event``).
    wait: str
    #: Seconds since the statement began.
    seconds: float
    #: The start of the statement that waits.
    statement: str
    #: The sessions that hold the lock it waits for (process ids).
    blocked_by: tuple[int, ...] = ()


class DatabaseReports:
    """The readers' SQL for one database, behind one interface."""

    vendor: ClassVar[str]
    #: Whether deleted and updated rows stay until a vacuum removes them, so that a long open
    #: transaction or a lagging vacuum slows every claim (``oldest_transaction``, ``dead_rows``).
    has_vacuum: ClassVar[bool] = False
    #: Whether ``estimated_rows`` gives an estimate (else None), so that a count that takes
    #: too long can give way to it.
    estimates_rows: ClassVar[bool] = False
    #: Whether the planner sees for itself that a filter implies a partial index's condition
    #: (``status = 'failed'`` implies ``status IN ('succeeded', 'failed', 'cancelled')``).
    #: Where it does not (SQLite), a query spells the condition out to use the index; where it
    #: does, the spelled-out condition may steer the planner to the wider index.
    infers_partial_index_conditions: ClassVar[bool] = False

    def seconds_between(self, start: str, end: str) -> str:
        """SQL for the seconds from column ``start`` to column ``end``, as a float."""
        raise NotImplementedError

    def minute_bucket(self, column: str) -> str:
        """SQL for the bucket of the datetime ``column``: its seconds since a window's start
        (the first parameter, epoch seconds) divided by a bucket's length (the second), as an
        integer."""
        raise NotImplementedError

    def durations(
        self, cursor: Any, source: str, params: Sequence[Any], percentiles: Sequence[int]
    ) -> Durations:
        """Summarize the ``duration`` column of the rows of ``source`` (SQL, a subquery)."""
        raise NotImplementedError

    def slices_sql(
        self,
        connection: BaseDatabaseWrapper,
        one_slice: str,
        params: Sequence[Any],
        lows: Sequence[datetime.datetime],
        highs: Sequence[datetime.datetime],
    ) -> tuple[str, list[Any]]:
        """One statement that runs ``one_slice`` (SQL with ``{low}`` and ``{high}`` where each
        slice's bounds go, then ``params``' placeholders) for every slice."""
        raise NotImplementedError

    def estimated_count(self, cursor: Any, table: str, where: str, params: Sequence[Any]) -> int:
        """How many rows of ``table`` match ``where``: an estimate where the database has one,
        else the count."""
        cursor.execute(f"SELECT count(*) FROM {table} WHERE {where}", params)
        return int(cursor.fetchone()[0])

    def estimated_rows(self, queryset: QuerySet[Any]) -> int | None:
        """The database's estimate of the rows ``queryset`` matches, without running it; None
        where it has none."""
        return None

    def has_error_trigram_index(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether the jobs' errors have the trigram index that the admin's error search can
        read (PostgreSQL with pg_trgm: migration 0021 builds it where it can)."""
        return False

    def oldest_transaction(self, connection: BaseDatabaseWrapper) -> OpenTransaction | None:
        """The oldest transaction open in another session (``has_vacuum`` databases)."""
        raise NotImplementedError

    def dead_rows(self, connection: BaseDatabaseWrapper, table: str) -> DeadRows | None:
        """``table``'s dead rows (``has_vacuum`` databases); None before any statistics."""
        raise NotImplementedError

    def lock_waits(
        self, connection: BaseDatabaseWrapper, application_names: Sequence[str]
    ) -> list[LockWait]:
        """The sessions named ``application_names`` (workers' own connections) waiting for a
        lock now; empty where the database cannot tell (SQLite)."""
        return []


def nearest_rank_durations(
    cursor: Any, source: str, params: Sequence[Any], percentiles: Sequence[int]
) -> Durations:
    """``DatabaseReports.durations`` without a percentile function: count, then read each
    percentile's row (the nearest rank) in the database's order."""
    cursor.execute(
        f"SELECT count(duration), avg(duration), min(duration), max(duration) FROM {source}",
        params,
    )
    count, average, shortest, longest = cursor.fetchone()
    found = []
    for percentile in percentiles if count else ():
        rank = max(0, -(-percentile * count // 100) - 1)
        cursor.execute(
            f"SELECT duration FROM {source} WHERE duration IS NOT NULL "
            "ORDER BY duration LIMIT 1 OFFSET %s",
            [*params, rank],
        )
        found.append(cursor.fetchone()[0])
    return Durations(
        count,
        None if average is None else float(average),
        None if shortest is None else float(shortest),
        None if longest is None else float(longest),
        [float(value) for value in found],
    )


def union_of_slices(
    connection: BaseDatabaseWrapper,
    one_slice: str,
    params: Sequence[Any],
    lows: Sequence[datetime.datetime],
    highs: Sequence[datetime.datetime],
) -> tuple[str, list[Any]]:
    """``DatabaseReports.slices_sql`` as a UNION ALL of one subquery per slice."""
    parts = [
        f"SELECT * FROM ({one_slice.format(low='%s', high='%s')}) AS slice{number}"
        for number in range(len(lows))
    ]
    adapt = connection.ops.adapt_datetimefield_value
    sample_params: list[Any] = []
    for low, high in zip(lows, highs, strict=True):
        sample_params += [*params, adapt(low), adapt(high)]
    return " UNION ALL ".join(parts), sample_params
