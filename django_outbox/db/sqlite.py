"""SQLite, the embedded default: one writer at a time, so every claim is one UPDATE statement.

A single statement in autocommit mode takes the write lock for its whole run and waits for it
under the busy timeout, so two claimers never take the same row. The worker's own transactions
that read and then write begin IMMEDIATE: a deferred one fails at once with "database is
locked" when another connection wrote in between. Handlers' transactions stay DEFERRED, so a
handler holds the only write lock from its first write to its commit, not for its whole run.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..context import ClaimedJob
from ..models import CLAIMABLE, Job, JobStatus
from .rows import CLAIM_COLUMNS, claimed_jobs

TABLE = Job._meta.db_table
#: Whether workers can be woken by enqueues in other processes (``listen``).
LISTENS = False
# Django stores SQLite datetimes as UTC text in this shape; compare and write the same shape.
NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
# SQLite's clock has millisecond precision ('...26.074') but Django writes microseconds
# ('...26.074000'), which sorts after it: compare due times with the end of this millisecond.
DUE_BY = f"{NOW} || '999'"

CLAIM_SQL = f"""
UPDATE {TABLE}
SET status = '{JobStatus.RUNNING}',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?),
    worker_id = ?,
    started_at = {NOW},
    finished_at = NULL
WHERE id IN (
    SELECT id FROM {TABLE}
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= {DUE_BY}
      {{queue_filter}}
    ORDER BY priority DESC, run_at, id
    LIMIT ?
)
RETURNING {CLAIM_COLUMNS}
"""


def claim(
    connection: BaseDatabaseWrapper,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` runnable jobs of ``queues`` (all queues when ``None``)."""
    queues = list(queues or ())
    queue_filter = f"AND queue IN ({', '.join('?' * len(queues))})" if queues else ""
    sql = CLAIM_SQL.format(queue_filter=queue_filter)
    params = [f"+{lease_seconds:.3f} seconds", worker_id, *queues, limit]
    # Django's SQLite cursor wants %s placeholders; the raw sqlite3 cursor takes ? directly.
    cursor = _execute_raw(connection, sql, params)
    try:
        rows = cursor.fetchall()
    finally:
        cursor.close()
    return claimed_jobs(rows, worker_id)


SUCCEEDED_SET = f"""
SET status = '{JobStatus.SUCCEEDED}', finished_at = {NOW}, lease_token = NULL,
    lease_expires_at = NULL
"""

# Raw SQL, not the ORM: it runs once per job on the hot path. Tokens are stored as 32 hex digits.
MARK_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = ? AND lease_token = ? AND status = '{JobStatus.RUNNING}'
"""

# One statement per batch; each row is fenced by its own attempt's lease token.
MARK_MANY_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE status = '{JobStatus.RUNNING}' AND (id, lease_token) IN (VALUES {{rows}})
RETURNING id
"""

#: Jobs per statement, well under SQLite's limit on bound parameters.
BATCH_LIMIT = 400


def _execute_raw(connection: BaseDatabaseWrapper, sql: str, params: Sequence[object]) -> Any:
    """Run ``sql`` with ``?`` placeholders on the raw sqlite3 connection; return its cursor."""
    connection.ensure_connection()
    assert connection.connection is not None
    return connection.connection.execute(sql, params)


def mark_succeeded(connection: BaseDatabaseWrapper, job: ClaimedJob) -> bool:
    """Mark ``job`` succeeded; return False (changing nothing) if its lease was lost."""
    cursor = _execute_raw(connection, MARK_SUCCEEDED_SQL, [job.id, job.lease_token.hex])
    try:
        return bool(cursor.rowcount == 1)
    finally:
        cursor.close()


def mark_many_succeeded(connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]) -> set[int]:
    """Mark ``jobs`` succeeded in one statement per batch; return the ids of those still held."""
    marked: set[int] = set()
    for start in range(0, len(jobs), BATCH_LIMIT):
        batch = jobs[start : start + BATCH_LIMIT]
        sql = MARK_MANY_SUCCEEDED_SQL.format(rows=", ".join(["(?, ?)"] * len(batch)))
        params = [value for job in batch for value in (job.id, job.lease_token.hex)]
        cursor = _execute_raw(connection, sql, params)
        try:
            marked.update(row[0] for row in cursor.fetchall())
        finally:
            cursor.close()
    return marked


def insert_jobs(
    connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
) -> list[Job]:
    """Insert one job like ``template`` per (encoded) payload; return them, saved."""
    jobs = []
    for payload in payloads:
        job = copy.copy(template)
        job.payload = payload
        jobs.append(job)
    return Job.objects.using(connection.alias).bulk_create(jobs)


# Databases switched to WAL by this process: the mode is stored in the database file.
_wal_databases: set[str] = set()


def prepare_worker_connection(connection: BaseDatabaseWrapper) -> None:
    """Switch the database to WAL, so readers don't block the writer (once per process)."""
    name = str(connection.settings_dict["NAME"])
    if name not in _wal_databases:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
        _wal_databases.add(name)


@contextmanager
def write_transaction(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """A transaction that takes the write lock at BEGIN, for code that reads and then writes."""
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
