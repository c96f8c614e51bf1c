"""PostgreSQL: claims with FOR UPDATE SKIP LOCKED, so many workers on many hosts share a table."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..context import ClaimedJob
from ..models import CLAIMABLE, Job, JobStatus
from .rows import CLAIM_COLUMNS, claimed_jobs

logger = logging.getLogger("django_outbox.worker")

TABLE = Job._meta.db_table
#: Whether workers can be woken by enqueues in other processes (``listen``).
LISTENS = True
#: The channel the enqueue trigger (migration 0002) notifies, with the queue's name as payload.
CHANNEL = "django_outbox"

# Claim up to %(limit)s runnable jobs in one statement. SKIP LOCKED makes concurrent claimers
# pass over each other's rows instead of waiting; the outer UPDATE re-checks the status so a
# row changed since the scan is not claimed. Times are the database's, never a host's.
CLAIM_SQL = f"""
WITH picked AS (
    SELECT id FROM {TABLE}
    WHERE status IN ({", ".join(f"'{status}'" for status in CLAIMABLE)})
      AND run_at <= now()
      {{queue_filter}}
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {TABLE} AS job
SET status = '{JobStatus.RUNNING}',
    attempts = job.attempts + 1,
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    worker_id = %(worker_id)s,
    started_at = now(),
    finished_at = NULL
FROM picked
WHERE job.id = picked.id
RETURNING {", ".join(f"job.{column}" for column in CLAIM_COLUMNS.split(", "))}
"""


def claim(
    connection: BaseDatabaseWrapper,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` runnable jobs of ``queues`` (all queues when ``None``)."""
    queue_filter = "AND queue = ANY(%(queues)s)" if queues else ""
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM_SQL.format(queue_filter=queue_filter),
            {
                "limit": limit,
                "lease_seconds": lease_seconds,
                "worker_id": worker_id,
                "queues": list(queues or ()),
            },
        )
        return claimed_jobs(cursor.fetchall(), worker_id)


# Raw SQL, not the ORM: these run once per job (or per batch) on the hot path, where compiling
# an ORM UPDATE costs more than the statement itself.
SUCCEEDED_SET = f"""
SET status = '{JobStatus.SUCCEEDED}', finished_at = now(), lease_token = NULL,
    lease_expires_at = NULL
"""

MARK_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = %s AND lease_token = %s AND status = '{JobStatus.RUNNING}'
"""

# One statement for a batch; each row is fenced by its own attempt's lease token.
MARK_MANY_SUCCEEDED_SQL = f"""
UPDATE {TABLE} AS job {SUCCEEDED_SET}
FROM unnest(%s::bigint[], %s::uuid[]) AS done(id, lease_token)
WHERE job.id = done.id AND job.lease_token = done.lease_token
  AND job.status = '{JobStatus.RUNNING}'
RETURNING job.id
"""


def mark_succeeded(connection: BaseDatabaseWrapper, job: ClaimedJob) -> bool:
    """Mark ``job`` succeeded; return False (changing nothing) if its lease was lost."""
    with connection.cursor() as cursor:
        cursor.execute(MARK_SUCCEEDED_SQL, [job.id, job.lease_token])
        return bool(cursor.rowcount == 1)


def mark_many_succeeded(connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]) -> set[int]:
    """Mark ``jobs`` succeeded in one statement; return the ids of those still held."""
    with connection.cursor() as cursor:
        cursor.execute(
            MARK_MANY_SUCCEEDED_SQL,
            [[job.id for job in jobs], [job.lease_token for job in jobs]],
        )
        return {row[0] for row in cursor.fetchall()}


def listen(
    connection: BaseDatabaseWrapper,
    on_enqueue: Callable[[str], None],
    stop: threading.Event,
    retry_seconds: float,
) -> None:
    """Call ``on_enqueue(queue)`` for every enqueue NOTIFY until ``stop`` is set.

    Runs on a connection of its own (LISTEN needs one that stays idle, outside transactions),
    reconnecting after ``retry_seconds`` when it breaks; the worker's polling covers the gaps.
    """
    try:
        import psycopg
    except ImportError:
        logger.warning("wake-ups need psycopg 3; the worker polls instead")
        return
    reconnecting = False
    while not stop.is_set():
        listener: Any = None
        try:
            listener = psycopg.connect(**connection.get_connection_params(), autocommit=True)
            listener.execute(f"LISTEN {CHANNEL}")
            if reconnecting:
                # Jobs enqueued while not listening were missed: look once.
                on_enqueue("")
            while not stop.is_set():
                for notification in listener.notifies(timeout=0.5):
                    on_enqueue(notification.payload)
        except psycopg.Error:
            reconnecting = True
            logger.warning(
                "listening for enqueues failed; polling until it reconnects in %ss",
                retry_seconds,
                exc_info=True,
            )
            stop.wait(retry_seconds)
        finally:
            if listener is not None:
                listener.close()


def prepare_worker_connection(connection: BaseDatabaseWrapper) -> None:
    """Nothing to do: PostgreSQL's defaults suit the worker."""


def write_transaction(connection: BaseDatabaseWrapper) -> AbstractContextManager[None]:
    """A plain transaction: row locks (SELECT ... FOR UPDATE) do what SQLite's BEGIN does."""
    return transaction.atomic(using=connection.alias)
