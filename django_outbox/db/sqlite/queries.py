"""SQLite, the embedded default: one writer at a time, so every claim is one UPDATE statement.

A single statement in autocommit mode takes the write lock for its whole run and waits for it
under the busy timeout, so two claimers never take the same row. The worker's own transactions
that read and then write begin IMMEDIATE: a deferred one fails at once with "database is
locked" when another connection wrote in between. Handlers' transactions stay DEFERRED, so a
handler holds the only write lock from its first write to its commit, not for its whole run.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from django.conf import settings
from django.core.checks import CheckMessage, Warning
from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ...claimed import ClaimedJob
from ...models import CLAIMABLE, Job, JobStatus
from ..base import (
    ClaimKind,
    DatabaseQueries,
    HeldBack,
    InsertedJobs,
    LimitedAsk,
    LimitedCandidate,
    Result,
    WholeLimit,
)
from ..limited import limited_candidates, limited_candidates_sql
from ..limited_steps import read_room, spend_tokens
from ..rows import CLAIM_COLUMNS, CLAIM_ORDER, CLAIMS, and_terms, claimed_jobs, queue_conditions

TABLE = Job._meta.db_table
# Django stores SQLite datetimes as UTC text in this shape; compare and write the same shape.
NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
# SQLite's clock has millisecond precision ('...26.074') but Django writes microseconds
# ('...26.074000'), which sorts after it: compare due times with the end of this millisecond.
DUE_BY = f"{NOW} || '999'"

CLAIM_SQL = f"""
UPDATE {TABLE}
SET status = '{JobStatus.RUNNING}',
    attempts = attempts + 1,
    -- A row made claimable with its attempts used up (edited by hand, imported, or retried
    -- by an older version) gets one more attempt rather than failing every claim on the
    -- attempts-within-max constraint, as the admin's retry does.
    max_attempts = MAX(max_attempts, attempts + 1),
    lease_token = lower(hex(randomblob(16))),
    lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?),
    worker_id = ?,
    started_at = {NOW},
    finished_at = NULL
WHERE id IN (
    SELECT id FROM {TABLE} AS candidate
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= {DUE_BY}
      {{queue_filter}}{{pick}}
    ORDER BY {{order}}
    LIMIT ?
)
RETURNING {CLAIM_COLUMNS}
"""


# Whether fair jobs, and limited jobs, are due, along their partial indexes.
FAIR_WAITING_SQL = f"""
SELECT 1 FROM {TABLE}
WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
  AND run_at <= {DUE_BY} AND fair_key IS NOT NULL AND limit_key IS NULL {{queue_filter}}
LIMIT 1
"""
LIMITED_WAITING_SQL = f"""
SELECT 1 FROM {TABLE}
WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
  AND run_at <= {DUE_BY} AND limit_key IS NOT NULL {{queue_filter}}
LIMIT 1
"""


SUCCEEDED_SET = f"""
SET status = '{JobStatus.SUCCEEDED}', finished_at = {NOW}, lease_token = NULL,
    lease_expires_at = NULL
"""

# Raw SQL, not the ORM: it runs once per job on the hot path. Tokens are stored as 32 hex digits.
MARK_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = ? AND lease_token = ? AND status = '{JobStatus.RUNNING}'
  AND NOT cancel_requested
"""

# One statement per batch; each row is fenced by its own attempt's lease token.
MARK_MANY_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE status = '{JobStatus.RUNNING}' AND NOT cancel_requested
  AND (id, lease_token) IN (VALUES {{rows}})
RETURNING id
"""

#: Jobs per statement, well under SQLite's limit on bound parameters.
BATCH_LIMIT = 400
#: How long one claim waits for the write lock before it is tried again: how long a stopping
#: worker may wait inside SQLite before it sees the stop.
CLAIM_LOCK_WAIT_SECONDS = 0.5


# Databases switched to WAL by this process: the mode is stored in the database file.
_wal_databases: set[str] = set()


class SQLiteQueries(DatabaseQueries):
    vendor: ClassVar[str] = "sqlite"
    one_writer: ClassVar[bool] = True
    supports_limited_claim_in_one_trip: ClassVar[bool] = True
    placeholder: ClassVar[str] = "?"
    due_by: ClassVar[str] = DUE_BY
    clock: ClassVar[str] = NOW
    # julianday() has millisecond precision, as SQLite's clock.
    clock_seconds: ClassVar[str] = "(julianday('now') - 2440587.5) * 86400.0"

    def _execute(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        # On the sqlite3 connection itself, with ? placeholders: Django's cursor would rewrite
        # %s placeholders on every call of these hot statements.
        assert connection.connection is not None
        cursor = connection.connection.execute(sql, params)
        try:
            rows = cursor.fetchall() if cursor.description else []
            return cursor.rowcount, rows
        finally:
            cursor.close()

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
        # Never plain: SQLite sets up the conditions' subqueries for next to nothing.
        pick, order = CLAIMS[ClaimKind.FULL if kind is ClaimKind.PLAIN else kind]
        terms, queue_params = queue_conditions("?", queues, excluded_queues, paused_retries)
        sql = CLAIM_SQL.format(queue_filter=and_terms(terms), pick=pick, order=order)
        params = [f"+{lease_seconds:.3f} seconds", worker_id, *queue_params, limit]
        _, rows = self.execute(connection, sql, params)
        return claimed_jobs(rows, worker_id)

    def waiting_kinds(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        excluded_queues: Sequence[str] = (),
    ) -> set[ClaimKind]:
        # Every claim is full here: only fair jobs are claimed apart.
        terms, queue_params = queue_conditions("?", queues, excluded_queues)
        queue_filter = and_terms(terms)
        waiting = set()
        _, rows = self.execute(
            connection, FAIR_WAITING_SQL.format(queue_filter=queue_filter), queue_params
        )
        if rows:
            waiting.add(ClaimKind.FAIR)
        sql = LIMITED_WAITING_SQL.format(queue_filter=queue_filter)
        _, rows = self.execute(connection, sql, queue_params)
        if rows:
            waiting.add(ClaimKind.LIMITED)
        return waiting

    def claim_chosen(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        ids: Sequence[int],
        lease_seconds: float,
    ) -> list[ClaimedJob]:
        pick = f"\n      AND id IN ({', '.join('?' * len(ids))})"
        sql = CLAIM_SQL.format(queue_filter="", pick=pick, order=CLAIM_ORDER)
        params = [f"+{lease_seconds:.3f} seconds", worker_id, *ids, len(ids)]
        _, rows = self.execute(connection, sql, params)
        return claimed_jobs(rows, worker_id)

    def claim_limited_batch(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
    ) -> list[tuple[ClaimedJob, str]]:
        return _with_keys(self._claim_limited_rows(connection, ask, held_back), ask.worker_id)

    def _claim_limited_rows(
        self, connection: BaseDatabaseWrapper, ask: LimitedAsk, held_back: HeldBack
    ) -> list[Any]:
        """``claim_limited_batch``'s rows as the claim returns them: limit key first."""
        candidates, params = limited_candidates_sql(
            self.placeholder,
            self.due_by,
            ask.queues,
            ask.paused_retries,
            held_back,
            ask.count,
            ask.excluded_queues,
        )
        # One statement: the write lock (this transaction's, from BEGIN) keeps every other
        # claim out until it commits.
        sql = CLAIM_SQL.format(
            queue_filter="", pick=f"\n      AND id IN (SELECT id FROM ({candidates}))", order="id"
        ).replace("RETURNING ", "RETURNING limit_key, ", 1)
        _, rows = self.execute(
            connection,
            sql,
            [f"+{ask.lease_seconds:.3f} seconds", ask.worker_id, *params, ask.count],
        )
        return rows

    def claim_limited_in_one_trip(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
        limits: Sequence[WholeLimit],
    ) -> tuple[list[tuple[ClaimedJob, str]], bool]:
        """Four statements (``limited_steps``): BEGIN IMMEDIATE, the read, the claim, the
        tokens' UPDATE; then COMMIT. The write lock, taken at BEGIN, stands for the limits'
        row locks; nothing but the statements runs while it is held (the claimed jobs are
        built after the commit)."""
        rows: list[Any] = []
        with self.write_transaction(connection):
            room = read_room(self, connection)
            passed_over = room.held_back(limits, ask.count, held_back)
            if passed_over is None:
                return [], True
            held, short = passed_over
            rows = self._claim_limited_rows(connection, ask, held)
            # RETURNING limit_key, then CLAIM_COLUMNS: id, task_name, queue, ...
            spend_tokens(self, connection, room, limits, ((row[2], row[3]) for row in rows))
        return _with_keys(rows, ask.worker_id), short

    def limited_candidates(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        paused_retries: Sequence[str],
        held_back: HeldBack,
        limit: int,
        excluded_queues: Sequence[str] = (),
    ) -> list[LimitedCandidate]:
        return limited_candidates(
            self, connection, queues, paused_retries, held_back, limit, excluded_queues
        )

    def database_seconds(self, connection: BaseDatabaseWrapper) -> float:
        _, rows = self.execute(connection, f"SELECT {self.clock_seconds}", ())
        return float(rows[0][0])

    def mark_succeeded(self, connection: BaseDatabaseWrapper, job: ClaimedJob) -> bool:
        rowcount, _ = self.execute(connection, MARK_SUCCEEDED_SQL, [job.id, job.lease_token.hex])
        return rowcount == 1

    def mark_many_succeeded(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]
    ) -> set[int]:
        marked: set[int] = set()
        for start in range(0, len(jobs), BATCH_LIMIT):
            batch = jobs[start : start + BATCH_LIMIT]
            sql = MARK_MANY_SUCCEEDED_SQL.format(rows=", ".join(["(?, ?)"] * len(batch)))
            params = [value for job in batch for value in (job.id, job.lease_token.hex)]
            _, rows = self.execute(connection, sql, params)
            marked.update(row[0] for row in rows)
        return marked

    def insert_jobs(
        self, connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
    ) -> InsertedJobs:
        return self.insert_jobs_with_orm(connection, template, payloads)

    def on_database_clock(self, when: datetime.datetime) -> datetime.datetime:
        """SQLite's clock is UTC whatever ``TIME_ZONE`` says.

        Without ``USE_TZ``, ``when`` is naive local time (``TIME_ZONE``): stored as it is, a
        delay would end hours early or late by the zone's offset.
        """
        if settings.USE_TZ:
            return when
        local = timezone.make_aware(when, timezone.get_default_timezone())
        return timezone.make_naive(local, datetime.timezone.utc)

    def prepare_worker_connection(self, connection: BaseDatabaseWrapper) -> None:
        """Switch the database to WAL, so readers don't block the writer (once per process)."""
        name = str(connection.settings_dict["NAME"])
        if name not in _wal_databases:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA journal_mode=WAL")
            _wal_databases.add(name)

    def compatibility_problems(self, connection: BaseDatabaseWrapper) -> list[CheckMessage]:
        """Warn where the project's transactions begin deferred (Django's default on SQLite):
        an atomic job whose handler reads and then writes cannot take the write lock at its
        first write once another connection (this worker's heartbeat, say) wrote since its
        read, and runs again within its attempt, side effects and all."""
        options = connection.settings_dict.get("OPTIONS") or {}
        mode = str(options.get("transaction_mode") or "DEFERRED").upper()
        if mode in ("IMMEDIATE", "EXCLUSIVE"):
            return []
        return [
            Warning(
                f"SQLite transactions on database {connection.alias!r} begin {mode}: an "
                "atomic=True job whose handler reads and then writes runs again within its "
                "attempt, its side effects (an email sent) included, when another connection "
                "writes in between, the worker's own heartbeat among them.",
                hint=(
                    f'Set DATABASES["{connection.alias}"]["OPTIONS"]["transaction_mode"] = '
                    '"IMMEDIATE", as docs/quickstart.md does (docs/databases.md says why).'
                ),
                id="django_outbox.W052",
            )
        ]

    @contextmanager
    def write_transaction(self, connection: BaseDatabaseWrapper) -> Iterator[None]:
        """A transaction that takes the write lock at BEGIN, for code that reads then writes."""
        if connection.in_atomic_block:
            # Nested: the outer transaction decided how it began.
            with transaction.atomic(using=connection.alias):
                yield
            return
        # Connect first: connecting resets transaction_mode from the settings.
        connection.ensure_connection()
        configured = connection.transaction_mode  # type: ignore[attr-defined]
        connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
        try:
            with transaction.atomic(using=connection.alias):
                connection.transaction_mode = configured  # type: ignore[attr-defined]
                yield
        finally:
            connection.transaction_mode = configured  # type: ignore[attr-defined]

    @contextmanager
    def lock_wait(self, connection: BaseDatabaseWrapper, seconds: float) -> Iterator[None]:
        """Lower the busy timeout: a write then fails after ``seconds`` (or the configured
        timeout, if shorter), e.g. when this worker's own handler holds the write lock."""
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout")
            (configured,) = cursor.fetchone()
            cursor.execute(f"PRAGMA busy_timeout = {min(int(seconds * 1000), int(configured))}")
        try:
            yield
        finally:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(f"PRAGMA busy_timeout = {int(configured)}")
            except DatabaseError:
                # A broken connection is replaced, and a new one has the configured timeout.
                connection.close()

    @contextmanager
    def claim_lock_wait(self, connection: BaseDatabaseWrapper) -> Iterator[None]:
        """A claim waiting for the write lock (a handler's transaction may hold it for as long
        as the handler runs) gives up after CLAIM_LOCK_WAIT_SECONDS and is tried again
        (``retry_while_locked``), unless the worker is stopping: SIGTERM must not wait out
        the whole busy timeout inside SQLite."""
        with self.lock_wait(connection, CLAIM_LOCK_WAIT_SECONDS):
            yield


def _with_keys(rows: Sequence[Any], worker_id: str) -> list[tuple[ClaimedJob, str]]:
    """The jobs of a limited claim's rows (limit key first), each with its limit key."""
    jobs = claimed_jobs((row[1:] for row in rows), worker_id)
    keys = {row[1]: row[0] for row in rows}
    return [(job, keys[job.id]) for job in jobs]


queries = SQLiteQueries()
