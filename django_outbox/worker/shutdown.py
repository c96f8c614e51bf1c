"""A worker's graceful stop: hand back what it has not started, record what outlived the wait.

Every write here waits for locks only briefly (``lock_wait``): on SQLite the lock may be held by
one of this worker's own handlers, which will not let go before it returns, so waiting for it
would stretch a stop far past ``--shutdown-timeout``. A write that cannot be made is logged and
left to the lease: the job's lease expires and another worker takes the job back.
"""

from __future__ import annotations

import logging
import queue

from django.db import DatabaseError, connections

from ..claimed import ClaimedJob
from ..db import queries_for, retry_while_locked
from ..jobs.transitions import Failure, record_failure, release
from .held_jobs import HeldJobs
from .job_logs import log_job

logger = logging.getLogger(__name__)

#: Longest wait for another transaction's locks while stopping, per write.
LOCK_WAIT_SECONDS = 0.5


def take_unstarted(ready: queue.Queue[ClaimedJob | None]) -> list[ClaimedJob]:
    """Empty ``ready`` of the jobs no thread has started."""
    unstarted: list[ClaimedJob] = []
    while True:
        try:
            job = ready.get_nowait()
        except queue.Empty:
            return unstarted
        if job is not None:
            unstarted.append(job)


def hand_back(jobs: list[ClaimedJob], held: HeldJobs, using: str, worker_id: str) -> bool:
    """Make ``jobs`` ready again, as if never claimed; return False if the database refused."""
    if not jobs:
        return True
    connection = connections[using]
    try:
        with queries_for(connection).lock_wait(connection, LOCK_WAIT_SECONDS):
            retry_while_locked(lambda: release(jobs, using), give_up_after=LOCK_WAIT_SECONDS)
    except DatabaseError as exc:
        connection.close()
        logger.warning(
            "could not hand back unstarted jobs yet count=%s worker=%s: %s",
            len(jobs),
            worker_id,
            exc,
        )
        return False
    with held.lock:
        held.drop([job.id for job in jobs])
    logger.info("handed back unstarted jobs count=%s worker=%s", len(jobs), worker_id)
    return True


def give_up_running(
    jobs: list[ClaimedJob],
    *,
    using: str,
    worker_id: str,
    waited: float,
    history_limit: int,
) -> None:
    """Record jobs still running after the shutdown wait as failed attempts, to rerun soon."""
    connection = connections[using]
    error = f"Worker {worker_id} shut down after waiting {waited}s for the job to finish."
    for job in jobs:
        retry_in = 0.0 if job.attempts < job.max_attempts else None
        try:
            with queries_for(connection).lock_wait(connection, LOCK_WAIT_SECONDS):
                status = record_failure(
                    job_id=job.id,
                    lease_token=job.lease_token,
                    attempt=job.attempts,
                    worker_id=worker_id,
                    failure=Failure(error=error, retry_in=retry_in),
                    history_limit=history_limit,
                    using=using,
                )
        except DatabaseError as exc:
            connection.close()
            log_job(
                logger,
                logging.WARNING,
                job,
                "not given up",
                "could not record it as given up (%s); its lease will expire and it runs again",
                exc,
            )
            continue
        if status is None:
            log_job(
                logger,
                logging.WARNING,
                job,
                "lease lost",
                "still running at shutdown: another worker owns it now; nothing recorded",
            )
        else:
            log_job(
                logger,
                logging.WARNING,
                job,
                "given up",
                "still running at shutdown status=%s",
                status,
            )
