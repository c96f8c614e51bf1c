"""PostgreSQL's reads for people: planner estimates, percentiles, and what vacuum is doing."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from ..reports import DatabaseReports, DeadRows, Durations, LockWait, OpenTransaction

#: The oldest transaction of another session of this database, and the oldest prepared one.
OLDEST_TRANSACTION_SQL = """
SELECT pid, EXTRACT(EPOCH FROM now() - xact_start)::float AS age, state, application_name
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
  AND backend_type = 'client backend'
ORDER BY xact_start
LIMIT 1
"""
OLDEST_PREPARED_SQL = """
SELECT gid, EXTRACT(EPOCH FROM now() - prepared)::float AS age
FROM pg_prepared_xacts WHERE database = current_database() ORDER BY prepared LIMIT 1
"""
#: Sessions of the named workers that wait for a lock, and who holds it.
LOCK_WAITS_SQL = """
SELECT application_name, wait_event_type || '/' || wait_event,
    EXTRACT(EPOCH FROM now() - query_start)::float, left(query, 200), pg_blocking_pids(pid)
FROM pg_stat_activity
WHERE datname = current_database() AND application_name = ANY(%s) AND wait_event_type = 'Lock'
ORDER BY query_start
"""
#: The trigram index of the jobs' errors (migration 0021 builds it where pg_trgm is there).
ERROR_TRIGRAM_INDEX = "outbox_job_error_trigrams"
#: Whether an index of that name exists where the job table's name resolves.
INDEX_EXISTS_SQL = "SELECT to_regclass(%s) IS NOT NULL"
DEAD_TUPLES_SQL = """
SELECT n_live_tup, n_dead_tup, EXTRACT(EPOCH FROM now() - GREATEST(last_autovacuum, last_vacuum))
FROM pg_stat_user_tables WHERE relid = %s::regclass
"""


def _planned_rows(plan: Any) -> int:
    """The row estimate of an ``EXPLAIN (FORMAT JSON)`` result (text or decoded)."""
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class PostgreSQLReports(DatabaseReports):
    vendor: ClassVar[str] = "postgresql"
    has_vacuum: ClassVar[bool] = True
    estimates_rows: ClassVar[bool] = True
    infers_partial_index_conditions: ClassVar[bool] = True

    def seconds_between(self, start: str, end: str) -> str:
        return f"EXTRACT(EPOCH FROM {end} - {start})::float"

    def minute_bucket(self, column: str) -> str:
        return f"floor((EXTRACT(EPOCH FROM {column})::float8 - %s) / %s)::int"

    def durations(
        self, cursor: Any, source: str, params: Sequence[Any], percentiles: Sequence[int]
    ) -> Durations:
        fractions = ", ".join(str(p / 100) for p in percentiles)
        cursor.execute(
            "SELECT count(duration), avg(duration), min(duration), max(duration), "
            f"percentile_cont(ARRAY[{fractions}]) WITHIN GROUP (ORDER BY duration) "
            f"FROM {source}",
            params,
        )
        count, average, shortest, longest, found = cursor.fetchone()
        return Durations(count, average, shortest, longest, list(found or []))

    def slices_sql(
        self,
        connection: BaseDatabaseWrapper,
        one_slice: str,
        params: Sequence[Any],
        lows: Sequence[datetime.datetime],
        highs: Sequence[datetime.datetime],
    ) -> tuple[str, list[Any]]:
        # One subquery planned once and run per slice (a UNION of a hundred takes longer to
        # plan than to run).
        sql = (
            "SELECT sample.* FROM unnest(%s::timestamptz[], %s::timestamptz[]) AS slice(low, high) "
            "CROSS JOIN LATERAL ("
            + one_slice.format(low="slice.low", high="slice.high")
            + ") AS sample"
        )
        return sql, [list(lows), list(highs), *params]

    def estimated_count(self, cursor: Any, table: str, where: str, params: Sequence[Any]) -> int:
        cursor.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {where}", params)
        return _planned_rows(cursor.fetchone()[0])

    def estimated_rows(self, queryset: QuerySet[Any]) -> int | None:
        # EXPLAIN plans the query without running it: about a millisecond.
        return _planned_rows(queryset.order_by().explain(format="json"))

    def has_error_trigram_index(self, connection: BaseDatabaseWrapper) -> bool:
        # Asked at each search (a catalog lookup): the index may be built or dropped later.
        with connection.cursor() as cursor:
            cursor.execute(INDEX_EXISTS_SQL, [ERROR_TRIGRAM_INDEX])
            return bool(cursor.fetchone()[0])

    def oldest_transaction(self, connection: BaseDatabaseWrapper) -> OpenTransaction | None:
        with connection.cursor() as cursor:
            cursor.execute(OLDEST_TRANSACTION_SQL)
            session = cursor.fetchone()
            cursor.execute(OLDEST_PREPARED_SQL)
            prepared = cursor.fetchone()
        candidates = []
        if session is not None:
            pid, age, state, application = session
            candidates.append(
                (age, f"pid {pid}, {state or 'state hidden'}, application {application or '-'!r}")
            )
        if prepared is not None:
            gid, age = prepared
            candidates.append((age, f"prepared transaction {gid!r}"))
        if not candidates:
            return None
        age, holder = max(candidates)
        return OpenTransaction(age, holder)

    def dead_rows(self, connection: BaseDatabaseWrapper, table: str) -> DeadRows | None:
        with connection.cursor() as cursor:
            cursor.execute(DEAD_TUPLES_SQL, [table])
            row = cursor.fetchone()
        return None if row is None else DeadRows(*row)

    def lock_waits(
        self, connection: BaseDatabaseWrapper, application_names: Sequence[str]
    ) -> list[LockWait]:
        if not application_names:
            return []
        with connection.cursor() as cursor:
            cursor.execute(LOCK_WAITS_SQL, [list(application_names)])
            rows = cursor.fetchall()
        return [
            LockWait(name, wait, seconds or 0.0, " ".join((query or "").split()), tuple(pids))
            for name, wait, seconds, query, pids in rows
        ]


reports = PostgreSQLReports()
