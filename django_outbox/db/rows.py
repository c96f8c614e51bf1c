"""Turning claimed rows into ClaimedJob objects, the same for every database."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from ..context import ClaimedJob
from ..serialization import decode

#: The columns every claim query returns, in this order.
CLAIM_COLUMNS = "id, task_name, queue, payload, attempts, max_attempts, priority, lease_token"


def claimed_jobs(rows: Iterable[Sequence[Any]], worker_id: str) -> list[ClaimedJob]:
    """Build jobs from claim rows, highest priority first, then oldest."""
    jobs = []
    for job_id, task_name, queue, payload, attempts, max_attempts, priority, token in rows:
        if isinstance(payload, str | bytes):
            payload = json.loads(payload)
        jobs.append(
            ClaimedJob(
                id=job_id,
                task_name=task_name,
                queue=queue,
                payload=decode(payload),
                attempt=attempts,
                max_attempts=max_attempts,
                priority=priority,
                lease_token=token if isinstance(token, uuid.UUID) else uuid.UUID(token),
                worker_id=worker_id,
            )
        )
    # UPDATE ... RETURNING gives rows in no particular order.
    jobs.sort(key=lambda job: (-job.priority, job.id))
    return jobs
