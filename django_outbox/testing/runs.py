"""Running jobs in the test's own thread and transaction, one at a time, in claim order."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connections
from django.db.models import F, TextField
from django.db.models.functions import Cast, Greatest, Now

from ..claimed import ClaimedJob
from ..conf import get_settings
from ..db import queries_for
from ..db.base import ClaimKind
from ..db.rows import CLAIMS, CLAIMS_LIMITED, claimed_jobs
from ..exceptions import JobNotFound, JobStateError, OutboxError
from ..jobs.transitions import database_time_in
from ..models import CLAIMABLE, Job, JobStatus
from ..retry import RetryPolicy
from ..worker.runner import Outcome, run_job

#: The worker id of jobs run by these helpers, as the admin and ``current_job()`` show it.
WORKER_ID = "django_outbox.testing"
#: How many jobs ``run_jobs`` runs before it decides that jobs keep making more work forever.
RUN_LIMIT = 10_000
#: The lease of a job run here: long enough that no heartbeat is needed.
LEASE_SECONDS = 3600


class RunLimitExceeded(OutboxError):
    """``run_jobs`` ran its limit of jobs and more were still runnable (a job snoozes for 0 s or
    enqueues another forever)."""


def _jobs() -> Any:
    return Job.objects.using(get_settings().database)


def claim_job(job_id: int) -> ClaimedJob | None:
    """Claim the job ``job_id`` as a worker would, if it is ready or retrying."""
    token = uuid.uuid4()
    claimed = (
        _jobs()
        .filter(pk=job_id, status__in=CLAIMABLE)
        .update(
            # Before attempts: MySQL and MariaDB assign left to right, each assignment seeing
            # the ones before it (as the worker's claim does there).
            max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
            status=JobStatus.RUNNING,
            attempts=F("attempts") + 1,
            lease_token=token,
            lease_expires_at=database_time_in(LEASE_SECONDS),
            worker_id=WORKER_ID,
            started_at=Now(),
            finished_at=None,
        )
    )
    if not claimed:
        return None
    # The row the worker's claim returns (CLAIM_COLUMNS), payloads as text: the job's
    # attempt decodes them.
    row = (
        _jobs()
        .filter(pk=job_id)
        .values_list(
            "id",
            "task_name",
            "queue",
            Cast("payload", TextField()),
            "attempts",
            "max_attempts",
            "priority",
            "lease_token",
            Cast("resume_data", TextField()),
            Cast("context", TextField()),
        )
        .get()
    )
    (job,) = claimed_jobs([row], WORKER_ID)
    return job


def next_runnable(queue: str | None = None) -> int | None:
    """Return the id of the job a worker would claim next (of ``queue``), or None.

    By the claims' own conditions and order: due now, highest priority first, a keyed job
    only at the head of its key's line, a job only once its dependencies have succeeded; and
    fair jobs, by round, once no other job is runnable; then limited jobs, whatever their
    limits.
    """
    connection = connections[get_settings().database]
    # Not now(): inside the test's transaction that is when it began, before the retries
    # and snoozes it scheduled "now" (the ORM writes those with the statement's time).
    due_by = queries_for(connection).due_by
    claimable = ", ".join(f"'{status}'" for status in CLAIMABLE)
    queue_filter = "AND queue = %s" if queue is not None else ""
    # Limits are not applied here: every runnable limited job is next in its turn.
    for pick, order in (CLAIMS[ClaimKind.FULL], CLAIMS[ClaimKind.FAIR], CLAIMS_LIMITED):
        sql = (
            f"SELECT id FROM {Job._meta.db_table} AS candidate "
            f"WHERE status IN ({claimable}) AND run_at <= {due_by} {queue_filter}{pick} "
            f"ORDER BY {order} LIMIT 1"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [queue] if queue is not None else [])
            row = cursor.fetchone()
        if row:
            return int(row[0])
    return None


def run_claimed(job: ClaimedJob) -> Outcome:
    """Run ``job``'s attempt with the worker's runner; return how it ended."""
    outbox = get_settings()
    outcome = run_job(
        job,
        using=outbox.database,
        history_limit=outbox.error_history,
        fallback=RetryPolicy.from_setting(outbox.retry),
    )
    assert outcome is not None  # Without complete_later, the runner records every outcome.
    return outcome


def run_jobs(queue: str | None = None, *, limit: int = RUN_LIMIT) -> list[ClaimedJob]:
    """Run every job that is runnable now (of ``queue``), in this thread, and return them.

    Jobs run one at a time, in the order a worker claims them (priority, then run_at, then id),
    inside the caller's transaction (a test's), each with its own savepoint when
    ``atomic=True``. Jobs they enqueue run too, if due now; a failed attempt whose retry is due
    later waits. Errors are recorded on the jobs, not raised: see ``consume`` for that. Each
    returned job has ``result`` (what its handler returned) or ``error``.
    """
    ran: list[ClaimedJob] = []
    while (job_id := next_runnable(queue)) is not None:
        if len(ran) >= limit:
            raise RunLimitExceeded(
                f"run_jobs ran {limit} jobs and more are runnable: a job snoozes for 0 "
                "seconds or enqueues another forever? Pass limit= to allow more."
            )
        job = claim_job(job_id)
        if job is not None:
            run_claimed(job)
            ran.append(job)
    return ran


def consume(queue: str | None = None) -> Any:
    """Run exactly one job, the next a worker would claim (of ``queue``), and return what its
    handler returned. Its outcome is recorded as a worker's would be; if the handler raised,
    the exception is raised here too. Raise JobNotFound when no job is runnable."""
    job_id = next_runnable(queue)
    job = claim_job(job_id) if job_id is not None else None
    if job is None:
        where = f" in queue {queue!r}" if queue is not None else ""
        raise JobNotFound(f"No job is runnable now{where}: nothing to consume.")
    run_claimed(job)
    if job.error is not None:
        raise job.error
    return job.result


def force_retry(job: Job | int) -> Any:
    """Run a succeeded job again, now, and return what its handler returned (raising what it
    raised): does running it twice do what running it once did?"""
    job_id = job.pk if isinstance(job, Job) else job
    rows = _jobs().filter(pk=job_id)
    retried = rows.filter(status=JobStatus.SUCCEEDED).update(
        status=JobStatus.READY,
        run_at=Now(),
        finished_at=None,
        max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
    )
    if not retried:
        status = rows.values_list("status", flat=True).first()
        if status is None:
            raise JobNotFound(f"No job has id {job_id}.")
        raise JobStateError(f"Job {job_id} is {status}: force_retry runs succeeded jobs again.")
    claimed = claim_job(job_id)
    assert claimed is not None  # Made ready just above, in this transaction.
    run_claimed(claimed)
    if claimed.error is not None:
        raise claimed.error
    return claimed.result
