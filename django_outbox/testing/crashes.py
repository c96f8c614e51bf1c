"""What goes wrong in production, on demand: test that handlers are idempotent.

Delivery is at least once: a job runs again when its worker dies after the handler's side
effects, or when its lease expires while it runs. These helpers make each case happen in the
test's thread and transaction, with the queue's real transitions, so a test can assert that the
second run does no harm (one email, not two; one charge, not two).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from ..claimed import ClaimedJob, reset_current_job, set_current_job
from ..conf import get_settings
from ..exceptions import JobNotFound
from ..jobs.transitions import database_time_in, mark_succeeded, rescue_expired_leases
from ..models import Job, JobStatus
from ..tasks.registry import get_task
from .runs import claim_job, next_runnable, run_claimed


def _claim_next(queue: str | None) -> ClaimedJob:
    job_id = next_runnable(queue)
    job = claim_job(job_id) if job_id is not None else None
    if job is None:
        where = f" in queue {queue!r}" if queue is not None else ""
        raise JobNotFound(f"No job is runnable now{where}.")
    return job


def _run_handler_uncommitted(job: ClaimedJob) -> None:
    """Run ``job``'s handler as its worker would, and let nothing of it commit: an
    ``atomic=True`` handler's writes roll back (its transaction never reached COMMIT); what
    it did elsewhere (an email, an API call) and an ``atomic=False`` handler's writes stay."""
    task = get_task(job.task_name)
    job.decode_payload()
    context = set_current_job(job)
    try:
        if task.atomic:
            with transaction.atomic(using=get_settings().database):
                try:
                    job.result = task.run(job.payload)
                finally:
                    transaction.set_rollback(True, using=get_settings().database)
        else:
            job.result = task.run(job.payload)
    except Exception as exc:
        job.error = exc
    finally:
        job.handler_done = True
        reset_current_job(context)


def _expire_and_take_back(job: ClaimedJob) -> None:
    """Let ``job``'s lease run out and have a worker take it back, as after a crash: the
    attempt counts ("Lease expired" in its errors). The retry is made due now, so that the next
    run is this test's to start."""
    outbox = get_settings()
    jobs = Job.objects.using(outbox.database)
    jobs.filter(pk=job.id, lease_token=job.lease_token).update(
        lease_expires_at=database_time_in(-1)
    )
    rescue_expired_leases(outbox.database, outbox.error_history)
    jobs.filter(pk=job.id, status=JobStatus.RETRYING).update(run_at=Now())


def crash_after_handler(queue: str | None = None) -> ClaimedJob:
    """Run the next job's handler, then "kill" its worker before the outcome is written.

    The handler's side effects outside the job's transaction happen; an ``atomic=True``
    handler's writes roll back. The lease then expires and the job is taken back (its attempt
    counted, or failed if it was the last), due now: ``run_jobs()`` runs it again. Return the
    crashed attempt (``result`` or ``error`` of its handler).
    """
    job = _claim_next(queue)
    try:
        _run_handler_uncommitted(job)
    finally:
        _expire_and_take_back(job)
    return job


def take_over_while_running(queue: str | None = None) -> tuple[ClaimedJob, ClaimedJob]:
    """The next job's lease expires while its handler runs, and another worker runs it again.

    The first attempt's handler runs with ``current_job().lease_lost`` true (a long handler
    should stop early); its outcome is fenced off (an ``atomic=True`` handler's writes roll
    back, an ``atomic=False`` one's stay), and the second attempt runs to its own outcome.
    Return (first attempt, second attempt).
    """
    first = _claim_next(queue)
    _expire_and_take_back(first)
    first.mark_lease_lost()
    run_claimed(first)
    second = claim_job(first.id)
    if second is None:
        raise JobNotFound(f"Job {first.id} had no attempt left to be taken over with.")
    run_claimed(second)
    return first, second


def complete_late(queue: str | None = None) -> tuple[ClaimedJob, ClaimedJob]:
    """The next job's handler finishes, but its "succeeded" arrives after its lease expired
    and another worker ran the job again.

    The first handler runs unaware; then the second attempt runs to its own outcome; then the
    first attempt's success mark arrives and changes nothing (fenced by its lease token). An
    ``atomic=True`` first attempt's writes roll back with it. Return (first, second).
    """
    first = _claim_next(queue)
    _run_handler_uncommitted(first)
    _expire_and_take_back(first)
    second = claim_job(first.id)
    if second is None:
        raise JobNotFound(f"Job {first.id} had no attempt left to be run again with.")
    run_claimed(second)
    late = mark_succeeded(first, get_settings().database)
    assert not late, "a late success mark must be fenced off by its lease token"
    return first, second
