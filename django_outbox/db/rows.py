"""Turning claimed rows into ClaimedJob objects, the same for every database."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from ..context import ClaimedJob

#: The columns every claim query returns, in this order.
CLAIM_COLUMNS = (
    "id, task_name, queue, payload, attempts, max_attempts, priority, lease_token, resume_data, "
    "context"
)


def claimed_jobs(rows: Iterable[Sequence[Any]], worker_id: str) -> list[ClaimedJob]:
    """Build jobs from claim rows, highest priority first, then oldest.

    Payloads stay as stored until the job's attempt decodes them: a row whose payload cannot be
    decoded fails on its own, not the claim of every job with it.
    """
    jobs = []
    for row in rows:
        (
            job_id,
            task_name,
            queue,
            payload,
            attempts,
            max_attempts,
            priority,
            token,
            resumed,
            context,
        ) = row
        jobs.append(
            ClaimedJob(
                id=job_id,
                task_name=task_name,
                queue=queue,
                stored_payload=payload,
                attempts=attempts,
                max_attempts=max_attempts,
                priority=priority,
                lease_token=token if isinstance(token, uuid.UUID) else uuid.UUID(token),
                worker_id=worker_id,
                stored_resume_data=resumed,
                stored_context=context,
            )
        )
    # UPDATE ... RETURNING gives rows in no particular order.
    jobs.sort(key=lambda job: (-job.priority, job.id))
    return jobs
