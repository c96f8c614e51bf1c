"""SQLite, the embedded default: one writer at a time, so every claim is one UPDATE statement.

A single statement in autocommit mode takes the write lock for its whole run and waits for it
under the busy timeout, so two claimers never take the same row. The worker's own transactions
that read and then write begin IMMEDIATE: a deferred one fails at once with "database is
locked" when another connection wrote in between. Handlers' transactions stay DEFERRED, so a
handler holds the only write lock from its first write to its commit, not for its whole run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..context import ClaimedJob
from ..models import CLAIMABLE, Job, JobStatus
from .rows import CLAIM_COLUMNS, claimed_jobs

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
    connection.ensure_connection()
    assert connection.connection is not None
    raw = connection.connection.cursor()
    try:
        rows = raw.execute(sql, params).fetchall()
    finally:
        raw.close()
    return claimed_jobs(rows, worker_id)


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
