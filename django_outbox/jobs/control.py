"""Acting on jobs from outside a worker: cancelling them, resuming halted ones.

(Retrying a failed job with a corrected payload needs its task: ``tasks.enqueue``.)

Each function works in the caller's transaction on the outbox database, like ``enqueue``:
rolled back, nothing happened.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from django.db.models import F
from django.db.models.functions import Greatest, Now

from ..conf import get_settings
from ..exceptions import JobNotFound, JobStateError
from ..serialization import encode
from .wakeups import jobs_made_ready

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from ..models import Job


class Cancellation(enum.Enum):
    """What ``cancel()`` did."""

    # It had not started (ready, retrying or halted): it never runs.
    CANCELLED = "cancelled"
    # A worker holds it: the handler is asked to stop and the attempt ends as cancelled.
    REQUESTED = "requested"
    # Too late: it had already finished (succeeded, failed or cancelled). Nothing changed.
    FINISHED = "finished"


def job_id_of(job: Job | int) -> int:
    """Return the id of ``job`` (a Job or its id); raise JobNotFound for an unsaved Job."""
    from ..models import Job

    if isinstance(job, Job):
        if job.pk is None:
            raise JobNotFound("This job was never saved: it has no id.")
        return int(job.pk)
    if isinstance(job, int) and not isinstance(job, bool):
        return job
    raise TypeError(f"Pass a Job or a job's id (an int), not {type(job).__name__}.")


def outbox_jobs() -> QuerySet[Job]:
    """Return every job, on the outbox database."""
    from ..models import Job

    return Job.objects.using(get_settings().database)


def cancel_jobs(jobs: QuerySet[Job]) -> tuple[int, int]:
    """Cancel every job of ``jobs`` that has not finished; return (cancelled, requested).

    Jobs no worker holds are cancelled at once; running ones are asked to stop (see
    ``cancel``). Finished jobs are left as they are.
    """
    from ..models import CANCELLABLE, JobStatus

    cancelled = jobs.filter(status__in=CANCELLABLE).update(
        status=JobStatus.CANCELLED, finished_at=Now()
    )
    requested = jobs.filter(status=JobStatus.RUNNING, cancel_requested=False).update(
        cancel_requested=True
    )
    return cancelled, requested


def cancel(job: Job | int) -> Cancellation:
    """Cancel ``job`` (a Job or its id) and say how.

    A job that has not started never runs. A running one is asked to stop: its worker sees the
    request at its next heartbeat, stops extending the lease, and tells the handler
    (``current_job().cancel_requested``); however the handler then ends, the attempt ends as
    cancelled (an ``atomic=True`` job's writes roll back). Raise JobNotFound for an unknown id.
    """
    from ..models import JobStatus

    job_id = job_id_of(job)
    rows = outbox_jobs().filter(pk=job_id)
    cancelled, requested = cancel_jobs(rows)
    if cancelled:
        return Cancellation.CANCELLED
    if requested:
        return Cancellation.REQUESTED
    status = rows.values_list("status", flat=True).first()
    if status is None:
        raise JobNotFound(f"No job has id {job_id}.")
    # Asked before, still running: the first request stands.
    return Cancellation.REQUESTED if status == JobStatus.RUNNING else Cancellation.FINISHED


def resume_jobs(jobs: QuerySet[Job], data: Any = None) -> int:
    """Make the halted jobs of ``jobs`` ready to run now, each handed ``data``; return how
    many. Jobs in other statuses are left as they are."""
    from ..models import JobStatus

    encoded = encode(data, "data")
    halted = jobs.filter(status=JobStatus.HALTED)
    queues = list(halted.order_by().values_list("queue", flat=True).distinct())
    resumed = halted.update(
        status=JobStatus.READY,
        run_at=Now(),
        resume_data=encoded,
        halt_reason="",
        # A halt gave its attempt back; a row edited by hand may have none left.
        max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
    )
    if resumed:
        jobs_made_ready(jobs.db, queues)
    return resumed


def resume(job: Job | int, data: Any = None) -> None:
    """Make the halted ``job`` (a Job or its id) ready to run now, handing it ``data``.

    The handler's next run reads ``data`` from ``current_job().resume_data``; it is stored as
    payloads are (JSON, the same types, the same checks: PayloadError if it can't be). The
    run that halted did not count as an attempt. Raise JobNotFound for an unknown id and
    JobStateError for a job that is not halted.
    """
    job_id = job_id_of(job)
    rows = outbox_jobs().filter(pk=job_id)
    if not resume_jobs(rows, data):
        status = rows.values_list("status", flat=True).first()
        if status is None:
            raise JobNotFound(f"No job has id {job_id}.")
        raise JobStateError(
            f"Job {job_id} is {status}, not halted: only a job whose handler raised Halt can be "
            "resumed."
        )
