"""PostgreSQL: claims with FOR UPDATE SKIP LOCKED, so many workers on many hosts share a table."""

from __future__ import annotations

import datetime
import functools
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ...claimed import ClaimedJob
from ...models import CLAIMABLE, Job, JobStatus
from ..base import (
    ClaimKind,
    DatabaseQueries,
    Heartbeat,
    HeldBack,
    InsertedJobs,
    LimitedAsk,
    LimitedCandidate,
    Result,
    WholeLimit,
    application_name_of,
)
from ..fair_rounds import ROUNDS_SQL, rounds_params
from ..limited import limited_candidates, limited_candidates_sql
from ..outage import ErrorBackoff
from ..rows import CLAIM_COLUMNS, CLAIM_ORDER, CLAIMS, SPECIAL_WAITING, claimed_jobs
from . import limited as one_trip

logger = logging.getLogger(__name__)

TABLE = Job._meta.db_table
#: The channel the enqueue trigger (migration 0002) notifies, with the queue's name as payload.
CHANNEL = "django_outbox"

# Claim up to %(limit)s runnable jobs in one statement. SKIP LOCKED makes concurrent claimers
# pass over each other's rows instead of waiting, and the rows picked are locked until the
# UPDATE, which finds them by primary key (`= ANY(ARRAY(...))`, an index condition in every
# plan; a join with the CTE can be planned as a scan of the whole table, see
# _set_up_for_bookkeeping). Times are the database's, never a host's. The
# payload comes back as text for the job's attempt to parse: the driver's own jsonb parser
# would fail the whole claim on one row's poison payload (one nested too deep, say).
CLAIM_PICKED_SQL = f"""
UPDATE {TABLE} AS job
SET status = '{JobStatus.RUNNING}',
    attempts = job.attempts + 1,
    -- A row made claimable with its attempts used up (edited by hand, imported, or retried
    -- by an older version) gets one more attempt rather than failing every claim on the
    -- attempts-within-max constraint, as the admin's retry does.
    max_attempts = GREATEST(job.max_attempts, job.attempts + 1),
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    worker_id = %(worker_id)s,
    started_at = now(),
    finished_at = NULL
WHERE job.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {
    ", ".join(f"job.{column}" for column in CLAIM_COLUMNS.split(", "))
    .replace("job.payload", "job.payload::text")
    .replace("job.resume_data", "job.resume_data::text")
    .replace("job.context", "job.context::text")
}
"""
CLAIM_SQL = (
    f"""
WITH picked AS (
    SELECT id FROM {TABLE} AS candidate
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= now()
      {{queue_filter}}{{pick}}
    ORDER BY {{order}}
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)"""
    + CLAIM_PICKED_SQL
)


# Which claims besides the plain one would find jobs due now: keyed or dependent ones (for a
# full claim), and fair ones; along partial indexes that hold only such jobs.
WAITING_KINDS_SQL = f"""
SELECT EXISTS (
    SELECT 1 FROM {TABLE}
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= now() AND {SPECIAL_WAITING}
      {{queue_filter}}
), EXISTS (
    SELECT 1 FROM {TABLE}
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= now() AND fair_key IS NOT NULL AND limit_key IS NULL
      {{queue_filter}}
), EXISTS (
    SELECT 1 FROM {TABLE}
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= now() AND limit_key IS NOT NULL
      {{queue_filter}}
)
"""


def claim_sql(queue_filter: str, kind: ClaimKind) -> str:
    """The claim of ``kind``: its conditions and its order."""
    pick, order = CLAIMS[kind]
    return CLAIM_SQL.format(queue_filter=queue_filter, pick=pick, order=order)


#: The limited claim's last step: the jobs it chose, by id, if still runnable. Its transaction
#: may have waited for the limits' locks: the lease and the start count from this statement,
#: not from the transaction's start (now()).
CLAIM_CHOSEN_SQL = (
    CLAIM_SQL.format(queue_filter="", pick="\n      AND id = ANY(%(ids)s)", order=CLAIM_ORDER)
    .replace("lease_expires_at = now()", "lease_expires_at = statement_timestamp()")
    .replace("started_at = now()", "started_at = statement_timestamp()")
)


def limited_batch_sql(candidates: str) -> str:
    """The limited claim's batch (``claim_limited_batch``): the first of ``candidates`` (the
    limited candidates' query, with %s placeholders) that no other claim holds, claimed in one
    statement, each returned with its limit key first. Its lease and start count from this
    statement, as the chosen jobs' do (``CLAIM_CHOSEN_SQL``)."""
    claimed = (
        CLAIM_PICKED_SQL.replace("%(lease_seconds)s", "%s")
        .replace("%(worker_id)s", "%s")
        .replace("lease_expires_at = now()", "lease_expires_at = statement_timestamp()")
        .replace("started_at = now()", "started_at = statement_timestamp()")
        .replace("RETURNING ", "RETURNING job.limit_key, ", 1)
    )
    return f"WITH picked AS ({candidates}FOR UPDATE SKIP LOCKED\n){claimed}"


# Raw SQL, not the ORM: these run once per job (or per batch) on the hot path, where compiling
# an ORM UPDATE costs more than the statement itself.
SUCCEEDED_SET = f"""
SET status = '{JobStatus.SUCCEEDED}', finished_at = now(), lease_token = NULL,
    lease_expires_at = NULL
"""

MARK_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = %s AND lease_token = %s AND status = '{JobStatus.RUNNING}'
  AND NOT cancel_requested
"""

# One statement for a batch; each row is fenced by its own attempt's lease token. Tokens are
# random and new for every claim, so a row whose token is among the batch's holds its own: the
# two ANY()s say what pairing them would, and plan as a primary-key lookup whatever the
# table's statistics say (a join with unnest() can turn into a scan of the whole table).
# Rows another transaction has locked are passed over (the completer tries them again later)
# rather than holding up the batch; so are those cancel() asked to stop, which end cancelled.
MARK_MANY_SUCCEEDED_SQL = f"""
WITH markable AS (
    SELECT id FROM {TABLE}
    WHERE id = ANY(%s::bigint[]) AND lease_token = ANY(%s::uuid[])
      AND status = '{JobStatus.RUNNING}' AND NOT cancel_requested
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = ANY(ARRAY(SELECT id FROM markable))
RETURNING id
"""


# The heartbeat: extend the leases this worker still holds, passing over rows another
# transaction has locked (an operator's SELECT ... FOR UPDATE in psql, a caller's transaction
# around cancel()), which would otherwise make the whole beat, and every other lease, wait.
# FOR NO KEY UPDATE is the lock the UPDATE takes anyway; unlike FOR UPDATE it lets a new
# dependency's foreign key check (FOR KEY SHARE) through. Fenced by token as the completions.
EXTEND_LEASES_SQL = f"""
WITH extendable AS (
    SELECT id FROM {TABLE}
    WHERE id = ANY(%(ids)s::bigint[]) AND lease_token = ANY(%(tokens)s::uuid[])
      AND status = '{JobStatus.RUNNING}' AND NOT cancel_requested
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {TABLE}
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = ANY(ARRAY(SELECT id FROM extendable))
RETURNING id
"""

# What became of the jobs a heartbeat did not extend. A plain read: it never waits for locks.
STILL_HELD_SQL = f"""
SELECT id, cancel_requested, lease_expires_at <= now() FROM {TABLE}
WHERE id = ANY(%(ids)s::bigint[]) AND lease_token = ANY(%(tokens)s::uuid[])
  AND status = '{JobStatus.RUNNING}'
"""

# One job, as the ORM's save() would insert it, for a fraction of its Python: compiling the
# ORM's INSERT costs about as much as the statement's round trip and commit. A run_at of NULL
# is now(), the database's clock.
INSERT_JOB_SQL = f"""
INSERT INTO {TABLE} (task_name, queue, payload, status, priority, run_at, attempts,
    max_attempts, worker_id, enqueued_at, last_error, last_traceback, errors, unique_key,
    context, lock_key, has_dependencies, fair_key, limit_key, fair_round)
VALUES (%s, %s, %s::jsonb, '{JobStatus.READY}', %s, COALESCE(%s::timestamptz, now()), 0, %s, '',
    now(), '', '', '[]'::jsonb, %s, %s::jsonb, %s, %s, %s, %s, {{fair_round}})
RETURNING id, run_at, enqueued_at, fair_round
"""
#: A fair job's round, computed in its INSERT as ``fairness.first_round`` computes it (GREATEST
#: leaves NULLs out): one round trip fewer per fair enqueue.
FAIR_ROUND_SQL = f"""(
    SELECT GREATEST(COALESCE(next_due, GREATEST(running, last_waiting, 0)), key_last + 1)
    FROM ({ROUNDS_SQL.format(p="%s", due_by="statement_timestamp()")}) AS rounds
)"""
INSERT_FAIR_JOB_SQL = INSERT_JOB_SQL.format(fair_round=FAIR_ROUND_SQL)
INSERT_JOB_SQL = INSERT_JOB_SQL.format(fair_round="%s")

# Enqueuers that check before they insert (a unique key, a bounded queue's size) wait for
# each other until the first one's transaction ends, then look with a snapshot taken after the
# wait. Keys are hashed into the second half of a two-int advisory lock; a collision only makes
# two keys' enqueuers wait for each other.
ENQUEUERS_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
#: The first half of the outbox's advisory locks ("obox"), apart from an application's own.
ENQUEUERS_LOCK_CLASS = int.from_bytes(b"obox", "big") & 0x7FFFFFFF

# Many jobs of one task and options in one statement: only the payloads differ, so they travel
# as one JSON array (one json.dumps), and the other columns once. A None payload is stored as
# SQL NULL, as the ORM stores it. The ORM's bulk_create would prepare every field of
# every row in Python, several times the cost of the INSERT itself.
# One row comes back: the ids in payload order (the sequence numbers rows in insertion order)
# and now(), the enqueue time of every job of the transaction.
INSERT_JOBS_SQL = f"""
WITH inserted AS (
    INSERT INTO {TABLE} (task_name, queue, payload, status, priority, run_at, attempts,
        max_attempts, worker_id, enqueued_at, last_error, last_traceback, errors, context,
        lock_key, fair_key, limit_key, fair_round)
    SELECT %(task_name)s, %(queue)s, NULLIF(payload, 'null'), '{JobStatus.READY}', %(priority)s,
        COALESCE(%(run_at)s, now()), 0, %(max_attempts)s, '', now(), '', '', '[]'::jsonb,
        %(context)s::jsonb, %(lock_key)s, %(fair_key)s, %(limit_key)s,
        -- A fair key's jobs take consecutive rounds from the first one's (fairness.py).
        %(fair_round)s::bigint + position - 1
    FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS batch(payload, position)
    ORDER BY position
    RETURNING id
)
SELECT now(), array_agg(id ORDER BY id) FROM inserted
"""


@functools.cache
def _psycopg() -> Any:
    """psycopg 3, imported on first use: a project on SQLite alone need not install it."""
    import psycopg

    return psycopg


#: libpq's status of a result that holds rows (``psycopg.pq.ExecStatus.TUPLES_OK``).
_TUPLES_OK = 2


# The worker's own connections (by their driver connection) already set up for bookkeeping.
_bookkeeping_connections: weakref.WeakSet[Any] = weakref.WeakSet()
# The worker's own connections whose lock waits are bounded, and the bound (milliseconds).
_bounded_connections: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


#: libpq's settings a worker's connections get unless the project's ``OPTIONS`` set them. A
#: network partition, or a peer that vanished, must not hold a worker's thread for the
#: kernel's default of 15 minutes of retransmissions (or 2 of connection attempts): a statement
#: whose packets go unacknowledged for TCP_USER_TIMEOUT fails (and the loop reconnects), an
#: idle connection (the listener's) is probed after KEEPALIVES_IDLE seconds, and a connection
#: attempt gives up after CONNECT_TIMEOUT. docs/reliability.md has what a partition does.
WORKER_CONNECTION_OPTIONS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}


class PostgreSQLQueries(DatabaseQueries):
    vendor: ClassVar[str] = "postgresql"
    plain_claims: ClassVar[bool] = True
    supports_limited_claim_in_one_trip: ClassVar[bool] = True
    listens: ClassVar[bool] = True
    placeholder: ClassVar[str] = "%s"
    # Not now(): inside the enqueuer's transaction that is when the transaction began.
    due_by: ClassVar[str] = "statement_timestamp()"
    # The statement's time, not now(): inside a transaction that is when it began.
    clock: ClassVar[str] = "statement_timestamp()"
    clock_seconds: ClassVar[str] = "extract(epoch FROM statement_timestamp())"

    def _execute(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        """Run one statement; prepared when the project allows prepared statements.

        With ``OPTIONS["prepare_threshold"]`` set, the statement is prepared at once on a
        server-side binding cursor: planning these statements costs about as much as running
        them. Otherwise (Django's default, for poolers such as PgBouncer in transaction mode)
        it goes through Django's cursor and is planned every time.
        """
        return self._run(connection, sql, params, prepare=True)

    def _execute_unprepared(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        """Run one statement planned for this run alone, whatever the project allows."""
        return self._run(connection, sql, params, prepare=False)

    def execute_replanned(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        return self._checked(connection, sql, params, self._execute_unprepared)

    def _run(
        self, connection: BaseDatabaseWrapper, sql: str, params: Any, *, prepare: bool
    ) -> Result:
        if self.runs_on_django_cursor(connection):
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.rowcount, cursor.fetchall() if cursor.description else []
        with _psycopg().Cursor(connection.connection) as raw_cursor:
            raw_cursor.execute(sql, params, prepare=prepare)
            # Whether rows came back, from the result's status: ``description`` would build a
            # column object per column at each call, a tenth of a claim's Python.
            result = raw_cursor.pgresult
            has_rows = result is not None and result.status == _TUPLES_OK
            return raw_cursor.rowcount, raw_cursor.fetchall() if has_rows else []

    def execute_as_one_transaction(
        self, connection: BaseDatabaseWrapper, sql: str, params: Any
    ) -> Result:
        """Run ``sql``, statements separated by semicolons, in one round trip, as one
        transaction of their own; return the last statement's result.

        PostgreSQL runs the statements of one simple query as one implicit transaction (each
        statement with a snapshot of its own, as in any transaction at READ COMMITTED),
        committed after the last and rolled back at an error. Outside a transaction only.
        """
        if connection.connection is None:
            connection.ensure_connection()
        started = time.monotonic()
        try:
            # Client-side binding: the only cursor that sends several statements at once.
            with (
                connection.wrap_database_errors,
                _psycopg().ClientCursor(connection.connection) as cursor,
            ):
                cursor.execute(sql, params)
                result = self._result(cursor)
                while cursor.nextset():
                    result = self._result(cursor)
                return result
        finally:
            if connection.queries_logged:
                connection.queries_log.append(
                    {"sql": sql, "time": f"{time.monotonic() - started:.3f}"}
                )

    def execute_pipelined(
        self, connection: BaseDatabaseWrapper, statements: Sequence[tuple[str, list[Any]]]
    ) -> Result:
        """Run ``statements`` as one transaction of their own, sent at once (one round
        trip); return the last one's result. Outside a transaction only.

        Each statement has a snapshot of its own (READ COMMITTED), taken when the one before
        has finished: locks the first takes are held when the next starts. Prepared where the
        project allows prepared statements (``_execute``), in a pipeline; otherwise, or where
        libpq cannot pipeline, as one simple query (``execute_as_one_transaction``).
        """
        psycopg = _psycopg()
        if connection.connection is None:
            connection.ensure_connection()
        if self.runs_on_django_cursor(connection) or not psycopg.Pipeline.is_supported():
            sql = ";".join(statement for statement, _ in statements)
            params = [param for _, each in statements for param in each]
            return self.execute_as_one_transaction(connection, sql, params)
        driver_connection = connection.connection
        started = time.monotonic()
        try:
            with (
                connection.wrap_database_errors,
                psycopg.Cursor(driver_connection) as cursor,
                psycopg.Cursor(driver_connection) as last,
            ):
                try:
                    with driver_connection.pipeline():
                        cursor.execute("BEGIN")
                        for sql, params in statements[:-1]:
                            cursor.execute(sql, params, prepare=True)
                        last.execute(statements[-1][0], statements[-1][1], prepare=True)
                        cursor.execute("COMMIT")
                except BaseException:
                    # A statement failed (a lock wait timed out, say): the rest were not run,
                    # and the transaction waits for its end.
                    idle = psycopg.pq.TransactionStatus.IDLE
                    if driver_connection.info.transaction_status != idle:
                        driver_connection.execute("ROLLBACK")
                    raise
                result = last.pgresult
                has_rows = result is not None and result.status == _TUPLES_OK
                return last.rowcount, last.fetchall() if has_rows else []
        finally:
            if connection.queries_logged:
                connection.queries_log.append(
                    {
                        "sql": ";".join(statement for statement, _ in statements),
                        "time": f"{time.monotonic() - started:.3f}",
                    }
                )

    @staticmethod
    def _result(cursor: Any) -> Result:
        return cursor.rowcount, cursor.fetchall() if cursor.description else []

    def runs_on_django_cursor(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether the project keeps Django's default of no prepared statements."""
        return getattr(connection.connection, "prepare_threshold", None) is None

    def _set_up_for_bookkeeping(self, connection: BaseDatabaseWrapper) -> None:
        """Set up a connection that runs only the worker's own statements (claims, batched
        completions), once per connection.

        Its commits return before their WAL reaches the disk: if the server crashes and loses
        the last such commits, those jobs are simply claimable again and run again, the
        at-least-once a crash means anyway; nothing is lost, and the database stays
        consistent. It halves a claim's time. Enqueues and atomic jobs' commits stay
        synchronous, and flush every earlier asynchronous commit with them.

        Its plans never scan the whole table. A prepared claim may be planned once for good
        (PostgreSQL adopts a generic plan after five runs, where its estimated cost is no
        higher than the custom plans'; the limited one-trip claim forces it) for the table as
        it was then: made while a worker polled an empty queue, a plan free to choose would
        scan the table, and join it with itself, on every claim once a burst arrived, until the
        next ANALYZE (0.7 s a claim at 20,000 jobs; drains fell from 24,000 to 300 jobs/s).
        Every statement here has an index that serves it. Unprepared statements (no
        ``prepare_threshold``, e.g. behind a pooler) are planned at every run, for the table
        as it is, and need nothing.
        """
        connection.ensure_connection()
        driver_connection = connection.connection
        if driver_connection not in _bookkeeping_connections:
            self.execute(connection, "SET synchronous_commit TO off", ())
            if not self.runs_on_django_cursor(connection):
                # Only prepared statements keep a plan; unprepared ones are planned each run.
                self.execute(connection, "SET enable_seqscan TO off", ())
                # A query with no index to use (the limits' small table) then costs as much
                # as a "disabled" scan, above jit_above_cost: compiling it took 250 ms.
                self.execute(connection, "SET jit TO off", ())
            _bookkeeping_connections.add(driver_connection)

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        lease_seconds: float,
        paused_retries: Sequence[str] = (),
        kind: ClaimKind = ClaimKind.FULL,
        excluded_queues: Sequence[str] = (),
    ) -> list[ClaimedJob]:
        queue_filter = _queue_filter(queues, excluded_queues)
        if paused_retries:
            queue_filter += (
                f" AND NOT (status = '{JobStatus.RETRYING}' AND queue = ANY(%(paused)s))"
            )
        self._set_up_for_bookkeeping(connection)
        params: dict[str, Any] = {
            "limit": limit,
            "lease_seconds": lease_seconds,
            "worker_id": worker_id,
            "queues": list(queues or ()),
            "excluded": list(excluded_queues),
            "paused": list(paused_retries),
        }
        _, rows = self.execute(connection, claim_sql(queue_filter, kind), params)
        return claimed_jobs(rows, worker_id)

    def waiting_kinds(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        excluded_queues: Sequence[str] = (),
    ) -> set[ClaimKind]:
        _, rows = self.execute(
            connection,
            WAITING_KINDS_SQL.format(queue_filter=_queue_filter(queues, excluded_queues)),
            {"queues": list(queues or ()), "excluded": list(excluded_queues)},
        )
        special, fair, limited = rows[0]
        waiting = set()
        if special:
            waiting.add(ClaimKind.FULL)
        if fair:
            waiting.add(ClaimKind.FAIR)
        if limited:
            waiting.add(ClaimKind.LIMITED)
        return waiting

    def claim_chosen(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        ids: Sequence[int],
        lease_seconds: float,
    ) -> list[ClaimedJob]:
        params = {
            "ids": list(ids),
            "limit": len(ids),
            "lease_seconds": lease_seconds,
            "worker_id": worker_id,
        }
        _, rows = self.execute(connection, CLAIM_CHOSEN_SQL, params)
        return claimed_jobs(rows, worker_id)

    def claim_limited_batch(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
    ) -> list[tuple[ClaimedJob, str]]:
        self._set_up_for_bookkeeping(connection)
        candidates, params = limited_candidates_sql(
            self.placeholder,
            self.due_by,
            ask.queues,
            ask.paused_retries,
            held_back,
            ask.count,
            ask.excluded_queues,
        )
        sql = limited_batch_sql(candidates)
        params = [*params, ask.lease_seconds, ask.worker_id]
        # The statement's text changes with the limits held back: planned with the names at
        # hand then, kept (prepared) while none are, as in a drain under limits not reached.
        execute = self.execute_replanned if held_back != HeldBack() else self.execute
        _, rows = execute(connection, sql, params)
        jobs = claimed_jobs((row[1:] for row in rows), ask.worker_id)
        keys = {row[1]: row[0] for row in rows}
        return [(job, keys[job.id]) for job in jobs]

    def claim_limited_in_one_trip(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
        limits: Sequence[WholeLimit],
    ) -> tuple[list[tuple[ClaimedJob, str]], bool]:
        # Both statements at once on a connection outside any transaction: its own.
        assert not connection.in_atomic_block
        self._set_up_for_bookkeeping(connection)
        candidates, candidate_params = limited_candidates_sql(
            self.placeholder,
            self.due_by,
            ask.queues,
            ask.paused_retries,
            held_back,
            ask.count,
            ask.excluded_queues,
            conditions_added=one_trip.WITH_ROOM,
        )
        statements = one_trip.claim_in_one_trip_sql(
            CLAIM_PICKED_SQL,
            candidates,
            candidate_params,
            limits,
            ask.count,
            ask.lease_seconds,
            ask.worker_id,
        )
        _, rows = self.execute_pipelined(connection, statements)
        short = bool(rows[0][0])
        claimed = [row for row in rows if row[1] is not None]
        jobs = claimed_jobs((row[2:] for row in claimed), ask.worker_id)
        keys = {row[2]: row[1] for row in claimed}
        return [(job, keys[job.id]) for job in jobs], short

    def limited_candidates(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        paused_retries: Sequence[str],
        held_back: HeldBack,
        limit: int,
        excluded_queues: Sequence[str] = (),
    ) -> list[LimitedCandidate]:
        self._set_up_for_bookkeeping(connection)
        return limited_candidates(
            self, connection, queues, paused_retries, held_back, limit, excluded_queues
        )

    def database_seconds(self, connection: BaseDatabaseWrapper) -> float:
        _, rows = self.execute(connection, f"SELECT {self.clock_seconds}", ())
        return float(rows[0][0])

    def extend_leases(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob], lease_seconds: float
    ) -> Heartbeat:
        ids = [job.id for job in jobs]
        params = {
            "ids": ids,
            "tokens": [job.lease_token for job in jobs],
            "lease_seconds": lease_seconds,
        }
        _, rows = self.execute_replanned(connection, EXTEND_LEASES_SQL, params)
        extended = {row[0] for row in rows}
        if len(extended) == len(jobs):
            return Heartbeat()
        return self._heartbeat_missed(connection, jobs, extended)

    def still_held(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]
    ) -> dict[int, tuple[bool, bool]]:
        params = {"ids": [job.id for job in jobs], "tokens": [job.lease_token for job in jobs]}
        _, rows = self.execute_replanned(connection, STILL_HELD_SQL, params)
        return {job_id: (requested, expired) for job_id, requested, expired in rows}

    def mark_succeeded(self, connection: BaseDatabaseWrapper, job: ClaimedJob) -> bool:
        # On the handler's connection, whose settings are the project's: not prepared, so
        # planned for the table as it is. A generic plan made while the table held a page or
        # two is a sequential scan, and stays one (see _set_up_for_bookkeeping).
        rowcount, _ = self.execute_replanned(
            connection, MARK_SUCCEEDED_SQL, [job.id, job.lease_token]
        )
        return rowcount == 1

    def mark_many_succeeded(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]
    ) -> set[int]:
        self._set_up_for_bookkeeping(connection)
        # Not prepared: planned with the ids at hand, as a primary-key lookup. A generic plan
        # may pick the index of running jobs and read all of it, dead entries included.
        _, rows = self.execute_replanned(
            connection,
            MARK_MANY_SUCCEEDED_SQL,
            [[job.id for job in jobs], [job.lease_token for job in jobs]],
        )
        return {row[0] for row in rows}

    def insert_job(self, connection: BaseDatabaseWrapper, job: Job) -> None:
        run_at = job.run_at if isinstance(job.run_at, datetime.datetime) else None
        payload = None if job.payload is None else json.dumps(job.payload)
        params: tuple[Any, ...] = (
            job.task_name,
            job.queue,
            payload,
            job.priority,
            run_at,
            job.max_attempts,
            job.unique_key,
            None if job.context is None else json.dumps(job.context),
            job.lock_key,
            job.has_dependencies,
            job.fair_key,
            job.limit_key,
        )
        if job.fair_key is not None and job.fair_round is None:
            # The round is the database's to compute (enqueuers of the key serialized). Planned
            # at every run: prepared, a plan made while the table was nearly empty would scan
            # it for each round, and a transaction enqueueing thousands of fair jobs one by one
            # would take minutes (docs/performance.md, "Known limits").
            params += rounds_params(job.queue, job.fair_key)
            _, rows = self.execute_replanned(connection, INSERT_FAIR_JOB_SQL, params)
        else:
            params += (job.fair_round,)
            _, rows = self.execute(connection, INSERT_JOB_SQL, params)
        job.id, job.run_at, job.enqueued_at, job.fair_round = rows[0]
        job._state.adding = False
        job._state.db = connection.alias

    def serialize_enqueuers(self, connection: BaseDatabaseWrapper, key: str) -> None:
        self.execute(connection, ENQUEUERS_LOCK_SQL, (ENQUEUERS_LOCK_CLASS, key))

    def insert_jobs(
        self, connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
    ) -> InsertedJobs:
        # Unset (the database's default, now) unless enqueued with a delay or a run_at.
        run_at = template.run_at if isinstance(template.run_at, datetime.datetime) else None
        params: dict[str, Any] = {
            "task_name": template.task_name,
            "queue": template.queue,
            "priority": template.priority,
            "run_at": run_at,
            "max_attempts": template.max_attempts,
            "context": None if template.context is None else json.dumps(template.context),
            "lock_key": template.lock_key,
            "fair_key": template.fair_key,
            "limit_key": template.limit_key,
            "fair_round": template.fair_round,
            "payloads": json.dumps(payloads),
        }
        # Django's cursor: this runs in the caller's transaction, as the ORM's writes do.
        with connection.cursor() as cursor:
            cursor.execute(INSERT_JOBS_SQL, params)
            enqueued_at, ids = cursor.fetchone()
        return InsertedJobs(ids, enqueued_at=enqueued_at)

    def announce(self, connection: BaseDatabaseWrapper, queues: Sequence[str]) -> None:
        # What the enqueue trigger sends; NOTIFY is transactional, so it is sent at commit.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify(%s, queue) FROM unnest(%s::text[]) AS queue",
                [CHANNEL, sorted(set(queues))],
            )

    def write_transaction(self, connection: BaseDatabaseWrapper) -> AbstractContextManager[None]:
        """A plain transaction: row locks (SELECT ... FOR UPDATE) do what SQLite's BEGIN does."""
        return transaction.atomic(using=connection.alias)

    def transaction_broken(self, connection: BaseDatabaseWrapper) -> bool:
        """Also true when a statement failed and its error was caught without a savepoint."""
        if connection.needs_rollback:
            return True
        driver_connection: Any = connection.connection
        if driver_connection is None:
            return False
        in_error = _psycopg().pq.TransactionStatus.INERROR
        return bool(driver_connection.info.transaction_status == in_error)

    def configure_worker_connections(self, connection: BaseDatabaseWrapper) -> None:
        """Give the worker's connections TCP keepalives and timeouts (``WORKER_CONNECTION_
        OPTIONS``), each unless the project's ``OPTIONS`` sets it."""
        options = connection.settings_dict.setdefault("OPTIONS", {})
        for name, value in WORKER_CONNECTION_OPTIONS.items():
            options.setdefault(name, value)

    def bound_lock_waits(
        self, connection: BaseDatabaseWrapper, seconds: float, worker_id: str = ""
    ) -> None:
        """Set the session's ``lock_timeout`` (once per connection): a connection of the
        worker's own never waits longer than ``seconds`` for a row or table lock. Name the
        session after the worker (``application_name``, seen in ``pg_stat_activity``)."""
        connection.ensure_connection()
        driver_connection = connection.connection
        milliseconds = max(1, int(seconds * 1000))
        if _bounded_connections.get(driver_connection) != milliseconds:
            name = application_name_of(worker_id) if worker_id else None
            self.execute(
                connection,
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('application_name', COALESCE(%s, current_setting('application_name')),"
                " false)",
                (str(milliseconds), name),
            )
            _bounded_connections[driver_connection] = milliseconds

    @contextmanager
    def lock_wait(self, connection: BaseDatabaseWrapper, seconds: float) -> Iterator[None]:
        """Wait at most ``seconds`` for row locks (``lock_timeout``) within the block."""
        milliseconds = max(1, int(seconds * 1000))
        driver_connection = connection.connection
        bound = None if driver_connection is None else _bounded_connections.get(driver_connection)
        if bound is not None and bound <= milliseconds:
            # The worker's bound on this connection is as short already: no statement to add.
            yield
            return
        self.execute(connection, f"SET lock_timeout = {milliseconds}", ())
        try:
            yield
        finally:
            # Back to the connection's bound, if the worker set one; else the default.
            driver_connection = connection.connection
            bound = (
                None if driver_connection is None else _bounded_connections.get(driver_connection)
            )
            try:
                if bound is None:
                    self.execute(connection, "RESET lock_timeout", ())
                else:
                    self.execute(connection, f"SET lock_timeout = {bound}", ())
            except DatabaseError:
                # A broken connection is replaced, and a new one has the default.
                connection.close()

    def listen(
        self,
        connection: BaseDatabaseWrapper,
        on_enqueue: Callable[[str], None],
        stop: threading.Event,
        retry_seconds: float,
        channel: str = CHANNEL,
    ) -> None:
        """Call ``on_enqueue(queue)`` for every enqueue NOTIFY until ``stop`` is set (for
        every NOTIFY on ``channel``: the relay listens on its own).

        Runs on a connection of its own (LISTEN needs one that stays idle, outside
        transactions), reconnecting when it breaks; the worker's polling covers the gaps.
        """
        try:
            import psycopg
        except ImportError:
            logger.warning("wake-ups need psycopg 3; the worker polls instead")
            return
        errors = ErrorBackoff("listening for enqueues", logger, first_delay=retry_seconds)
        while not stop.is_set():
            listener: Any = None
            try:
                listener = psycopg.connect(**connection.get_connection_params(), autocommit=True)
                listener.execute(f"LISTEN {channel}")
                if errors.failing:
                    errors.succeeded()
                # What committed before LISTEN was missed: look once. At the start too: the
                # loop's first look may have run before the listener was connected, and an
                # idle relay's next look is seconds away.
                on_enqueue("")
                while not stop.is_set():
                    for notification in listener.notifies(timeout=0.5):
                        on_enqueue(notification.payload)
            except psycopg.Error as exc:
                stop.wait(errors.failed(exc))
            finally:
                if listener is not None:
                    listener.close()


queries = PostgreSQLQueries()


def _queue_filter(queues: Sequence[str] | None, excluded_queues: Sequence[str]) -> str:
    """The claims' condition on the queue: one of ``queues`` (any when empty), none of
    ``excluded_queues``; its parameters are ``queues`` and ``excluded``."""
    queue_filter = "AND queue = ANY(%(queues)s)" if queues else ""
    if excluded_queues:
        queue_filter += " AND queue <> ALL(%(excluded)s)"
    return queue_filter
