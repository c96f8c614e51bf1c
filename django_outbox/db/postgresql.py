"""PostgreSQL: claims with FOR UPDATE SKIP LOCKED, so many workers on many hosts share a table."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..context import ClaimedJob
from ..models import CLAIMABLE, Job, JobStatus
from .rows import CLAIM_COLUMNS, claimed_jobs

TABLE = Job._meta.db_table

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


def prepare_worker_connection(connection: BaseDatabaseWrapper) -> None:
    """Nothing to do: PostgreSQL's defaults suit the worker."""


def write_transaction(connection: BaseDatabaseWrapper) -> AbstractContextManager[None]:
    """A plain transaction: row locks (SELECT ... FOR UPDATE) do what SQLite's BEGIN does."""
    return transaction.atomic(using=connection.alias)
