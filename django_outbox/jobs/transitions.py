"""Every change of a job's status after enqueue, in one place.

Writes about an attempt match the attempt's lease token: a worker that lost its lease (another
worker took the job over) changes nothing. Lease times are computed by the database, so hosts'
clocks never decide who owns a job.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, models
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now
from django.utils import timezone

from .. import signals
from ..claimed import ClaimedJob
from ..conf import get_settings
from ..db import queries_for, write_transaction
from ..db.base import Heartbeat, held_rows
from ..db.partial_indexes import in_partial_index
from ..models import FINISHED, Job, JobDependency, JobStatus, WorkerProcess
from ..retry import RetryPolicy
from .wakeups import jobs_made_ready

#: Longest traceback kept per attempt; the start and the end (where the error is) are kept.
TRACEBACK_LIMIT = 20_000


def database_time_in(seconds: float) -> models.Expression:
    """Return the database's current time plus ``seconds``, as an expression."""
    return models.ExpressionWrapper(
        Now() + models.Value(datetime.timedelta(seconds=seconds)),
        output_field=models.DateTimeField(),
    )


def mark_succeeded(job: ClaimedJob, using: str) -> bool:
    """Mark ``job`` succeeded; return False (changing nothing) if its lease was lost or
    cancel() asked it to stop."""
    connection = connections[using]
    return bool(queries_for(connection).mark_succeeded(connection, job))


def still_held(jobs: Sequence[ClaimedJob], using: str) -> dict[int, bool]:
    """Of ``jobs``, those whose attempt still holds the row (read without waiting for
    locks): by id, whether cancel() asked it to stop."""
    connection = connections[using]
    held = queries_for(connection).still_held(connection, jobs)
    return {job_id: requested for job_id, (requested, _expired) in held.items()}


def deleted_jobs(job_ids: Collection[int], using: str) -> set[int]:
    """Of ``job_ids``, those whose row is gone: deleted while they ran (from the admin, by a
    prune of the project's own), rather than taken over by another worker."""
    present = Job.objects.using(using).filter(pk__in=list(job_ids)).values_list("pk", flat=True)
    return set(job_ids) - set(present)


def cancel_was_requested(job: ClaimedJob, using: str) -> bool:
    """Whether ``job``'s attempt still holds its row and cancel() asked it to stop."""
    return still_held([job], using).get(job.id, False)


def mark_many_succeeded(jobs: Sequence[ClaimedJob], using: str) -> set[int]:
    """Mark ``jobs`` succeeded in one statement; return the ids of those whose lease held.

    The others were taken over by another worker (their lease expired), which now owns them.
    """
    if not jobs:
        return set()
    connection = connections[using]
    marked: set[int] = queries_for(connection).mark_many_succeeded(connection, jobs)
    return marked


@dataclass(frozen=True)
class Failure:
    """What went wrong in one attempt, and when (if ever) to try again."""

    error: str
    traceback: str = ""
    # Seconds until the next attempt; None: the job has failed for good.
    retry_in: float | None = None


def _trimmed(text: str) -> str:
    if len(text) > TRACEBACK_LIMIT:
        half = TRACEBACK_LIMIT // 2
        text = (
            f"{text[:half]}\n... ({len(text) - TRACEBACK_LIMIT} characters cut) ...\n{text[-half:]}"
        )
    return storable(text)


def storable(text: str) -> str:
    """Return ``text`` as every supported database can store it.

    An error message quotes whatever the handler met: a NUL character (PostgreSQL's text
    refuses it) or a lone surrogate (not UTF-8) would make recording the failure itself fail,
    and leave the job running until its lease expired. Both are written as escapes.
    """
    if text.isascii() and "\x00" not in text:
        return text
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def record_failure(
    *,
    job_id: int,
    lease_token: Any,
    attempt: int,
    worker_id: str,
    failure: Failure,
    history_limit: int,
    using: str,
) -> JobStatus | None:
    """Record a failed attempt: retrying at its delay, or failed. Return the new status.

    Return None, changing nothing, when the lease is no longer held.
    """
    traceback = _trimmed(failure.traceback)
    error = storable(failure.error)
    entry: dict[str, Any] = {
        "attempt": attempt,
        "at": timezone.now().isoformat(),
        "worker": worker_id,
        "error": error,
        "traceback": traceback,
    }
    # Short: it holds the job's row lock between reading the history and writing it back.
    with write_transaction(using):
        held = Job.objects.using(using).filter(
            pk=job_id, lease_token=lease_token, status=JobStatus.RUNNING
        )
        row = (
            held.select_for_update()
            .annotate(database_now=Now())
            .values_list("pk", "errors", "started_at", "database_now")
            .first()
        )
        if row is None:
            return None
        # When the attempt started and ended, both by the database's clock (the claim set the
        # start): the admin shows how long each attempt took, which a worker's clock ahead or
        # behind the database's would make wrong.
        if row[2] is not None:
            entry["started_at"] = row[2].isoformat()
        if row[3] is not None:
            entry["at"] = row[3].isoformat()
        # A list unless the row was written by hand or by other code.
        errors = row[1] if isinstance(row[1], list) else []
        history = [*errors, entry][-history_limit:] if history_limit else []
        changes: dict[str, Any] = {
            "last_error": error,
            "last_traceback": traceback,
            "errors": history,
            "lease_token": None,
            "lease_expires_at": None,
        }
        if failure.retry_in is None:
            status = JobStatus.FAILED
            changes.update(finished_at=Now())
        else:
            status = JobStatus.RETRYING
            changes.update(run_at=database_time_in(failure.retry_in))
        held.update(status=status, **changes)
    return status


#: Longest halt reason kept.
HALT_REASON_LIMIT = 2_000


def _end_attempt(job: ClaimedJob, using: str, **changes: Any) -> bool:
    """Write ``changes`` and clear the lease of ``job``'s attempt; False if the lease was lost."""
    return bool(
        Job.objects.using(using)
        .filter(held_rows([job]))
        .update(lease_token=None, lease_expires_at=None, **changes)
    )


def record_snooze(job: ClaimedJob, seconds: float, using: str) -> bool:
    """Make ``job`` ready again in ``seconds``, this run not counted as an attempt."""
    return _end_attempt(
        job,
        using,
        status=JobStatus.READY,
        attempts=F("attempts") - 1,
        run_at=database_time_in(seconds),
    )


def record_halt(job: ClaimedJob, reason: str, using: str) -> bool:
    """Halt ``job`` until resumed, this run not counted as an attempt."""
    if len(reason) > HALT_REASON_LIMIT:
        reason = reason[:HALT_REASON_LIMIT] + "..."
    return _end_attempt(
        job,
        using,
        status=JobStatus.HALTED,
        attempts=F("attempts") - 1,
        halt_reason=storable(reason),
        # Whatever an earlier resume passed has been read: the next resume passes its own.
        resume_data=None,
    )


def record_cancelled(
    job: ClaimedJob, using: str, note: str = "", history_limit: int | None = None
) -> bool:
    """End ``job``'s attempt as cancelled (cancel() was called while it was claimed); False if
    the lease was lost.

    The job's history (``errors``) gets an entry saying that cancel() was requested during the
    attempt and what became of the attempt (``note``).
    """
    if history_limit is None:
        history_limit = get_settings().error_history
    entry = {
        "attempt": job.attempts,
        "at": timezone.now().isoformat(),
        "worker": job.worker_id,
        "event": "cancelled",
        "error": storable(f"Cancelled: cancel() was requested during this attempt. {note}".strip()),
    }
    # Short: it holds the job's row lock between reading the history and writing it back.
    with write_transaction(using):
        held = Job.objects.using(using).filter(held_rows([job]))
        row = held.select_for_update().values_list("errors", "started_at").first()
        if row is None:
            return False
        if row[1] is not None:
            entry["started_at"] = row[1].isoformat()
        errors = row[0] if isinstance(row[0], list) else []
        history = [*errors, entry][-history_limit:] if history_limit else []
        return bool(
            held.update(
                status=JobStatus.CANCELLED,
                finished_at=Now(),
                lease_token=None,
                lease_expires_at=None,
                errors=history,
            )
        )


def release(jobs: Sequence[ClaimedJob], using: str) -> int:
    """Hand claimed jobs that never started back as ready, as if never claimed."""
    if not jobs:
        return 0
    return (
        Job.objects.using(using)
        .filter(held_rows(jobs))
        .update(
            status=JobStatus.READY,
            attempts=F("attempts") - 1,
            lease_token=None,
            lease_expires_at=None,
            started_at=None,
            worker_id="",
        )
    )


def extend_leases(jobs: Sequence[ClaimedJob], lease_seconds: float, using: str) -> Heartbeat:
    """Extend the leases of ``jobs``, except those cancel() asked to stop and those whose row
    another transaction has locked (extended at a later beat); say which were lost, which are
    to stop and which were locked."""
    if not jobs:
        return Heartbeat()
    connection = connections[using]
    return queries_for(connection).extend_leases(connection, jobs, lease_seconds)


#: The statuses ``retry_failed`` makes ready again.
RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)


def retry_failed(jobs: models.QuerySet[Job]) -> int:
    """Make failed or cancelled jobs ready to run now, with one more attempt each. Return how
    many."""
    retryable = jobs.filter(status__in=RETRYABLE)
    queues = list(retryable.order_by().values_list("queue", flat=True).distinct())
    retried = retryable.update(
        status=JobStatus.READY,
        run_at=Now(),
        finished_at=None,
        cancel_requested=False,
        # One more attempt than made so far keeps the attempt history true.
        max_attempts=models.functions.Greatest(F("max_attempts"), F("attempts") + 1),
    )
    if retried:
        jobs_made_ready(jobs.db, queues)
    return retried


#: A worker whose registry row was written within this many heartbeats is alive (beating).
LIVE_HEARTBEATS = 2


def _live_holder(using: str, heartbeat_seconds: float) -> models.QuerySet[WorkerProcess]:
    """The registry row of the worker instance that claimed the outer job, if it beats.

    Such a worker extends the leases of every job it holds at each beat: when one of them
    expired all the same, another transaction has held the job's row locked (see
    ``DatabaseQueries.extend_leases``), and the worker will extend it once the row is free.
    Taking the job back would run it twice while its handler still runs. A worker restarted
    under the same id started after the job's attempt did, so its predecessor's jobs are
    taken back. Two heartbeats (a lease spans at least three) keep a killed worker's jobs from
    waiting longer than their lease.
    """
    return WorkerProcess.objects.using(using).filter(
        worker_id=OuterRef("worker_id"),
        started_at__lte=OuterRef("started_at"),
        last_heartbeat_at__gt=database_time_in(-LIVE_HEARTBEATS * heartbeat_seconds),
    )


def rescue_expired_leases(
    using: str,
    history_limit: int,
    batch_size: int = 100,
    held_tokens: Collection[uuid.UUID] = (),
    abandoned_tokens: Collection[uuid.UUID] = (),
    worker_id: str = "",
) -> int:
    """Take back jobs whose worker stopped renewing the lease; return how many.

    The lost attempt counts: the job retries after its queue's backoff, or fails when that was
    its last attempt. The new status clears the token, so the vanished worker, should it come
    back, changes nothing. ``held_tokens``: the lease tokens of the jobs the caller itself
    holds, which are not taken back (it knows it is alive, and its heartbeat may merely be
    late). Jobs are matched by token, never by worker id: a worker restarted under the same
    id (a systemd unit, a StatefulSet pod) must take back what its predecessor left.
    ``abandoned_tokens``: those of jobs the caller let go of without recording their outcome
    (the database failed meanwhile); taken back although the caller, their holder, still beats.
    ``worker_id``: the caller's own id, with every token it holds in ``held_tokens``: its jobs
    that it does not hold are jobs it never knew it had claimed (the claim committed, and its
    answer was lost with the connection: killed, or the server restarting), taken back
    although the caller still beats, as no one else would take them back while it lives.
    """
    outbox_settings = get_settings()
    expired_jobs = Job.objects.using(using).expired_leases()
    holder_gone = Q(~Exists(_live_holder(using, outbox_settings.heartbeat_seconds)))
    if abandoned_tokens:
        holder_gone |= Q(lease_token__in=list(abandoned_tokens))
    if worker_id:
        holder_gone |= Q(worker_id=worker_id)
    expired_jobs = expired_jobs.filter(holder_gone)
    if held_tokens:
        expired_jobs = expired_jobs.exclude(lease_token__in=list(held_tokens))
    # One transaction: the row locks keep two rescuers (or a late heartbeat) off these jobs.
    with write_transaction(using):
        expired = list(
            expired_jobs.select_for_update(skip_locked=True).values_list(
                "id",
                "lease_token",
                "attempts",
                "max_attempts",
                "queue",
                "worker_id",
                "cancel_requested",
            )[:batch_size]
        )
        for job_id, token, attempts, max_attempts, queue, worker_id, cancelling in expired:
            if cancelling:
                # Its worker stopped extending the lease because of the cancel request.
                Job.objects.using(using).filter(
                    pk=job_id, lease_token=token, status=JobStatus.RUNNING
                ).update(
                    status=JobStatus.CANCELLED,
                    finished_at=Now(),
                    lease_token=None,
                    lease_expires_at=None,
                )
                continue
            policy = RetryPolicy.from_setting(outbox_settings.queue_options(queue).retry)
            error = (
                f"Lease expired: worker {worker_id} stopped renewing it during attempt "
                f"{attempts} (it crashed, was killed, or lost the database)."
            )
            record_failure(
                job_id=job_id,
                lease_token=token,
                attempt=attempts,
                worker_id=worker_id,
                failure=Failure(
                    error=error,
                    retry_in=policy.delay(attempts) if attempts < max_attempts else None,
                ),
                history_limit=history_limit,
                using=using,
            )
    return len(expired)


#: Every status but the finished ones, by name: the pruner's look for dependents that still
#: wait goes from the dependency's index to each dependent's primary key.
UNFINISHED = [status for status in JobStatus.values if status not in FINISHED]

#: Finished statuses and the RETENTION key that says how long each is kept.
RETAINED = (
    (JobStatus.SUCCEEDED, "SUCCEEDED"),
    (JobStatus.FAILED, "FAILED"),
    (JobStatus.CANCELLED, "CANCELLED"),
)


def prune_finished(
    using: str,
    retention: dict[str, float | None],
    batch_size: int = 500,
    only: models.Q | None = None,
) -> int:
    """Delete one small batch of finished jobs per status older than ``retention`` (of those
    ``only`` selects, if given).

    Return how many were deleted; call again while it returns ``batch_size`` or more. Small
    batches keep each transaction (and, on SQLite, the write lock) short. A job that an
    unfinished job depends on is kept: deleted, it would read as never succeeded, and its
    dependent would wait for good.
    """
    deleted = 0
    for status, key in RETAINED:
        seconds = retention.get(key)
        if seconds is None:
            continue
        # Oldest first, along the index: the default order (-id) would walk every kept job.
        expired = (
            Job.objects.using(using)
            .filter(status=status, finished_at__lt=database_time_in(-seconds))
            .order_by("finished_at")
        )
        if only is not None:
            expired = expired.filter(only)
        # Jobs no other job depends on (nearly all), then those some job does, apart: these
        # are checked against their dependents by id, so that neither read ever scans the
        # table for unfinished jobs. Each along its partial index, on SQLite too
        # (partial_indexes): without the spelled-out condition SQLite scanned and sorted the
        # table for every batch, and the second read walked every expired job on both.
        deleted += _prune_batch(
            expired.filter(has_dependents=False).filter(in_partial_index(FINISHED)),
            using,
            batch_size,
        )
        deleted += _prune_batch(
            expired.filter(in_partial_index(FINISHED, parents=True)),
            using,
            batch_size,
            keep_waited_on=True,
        )
    return deleted


def _prune_batch(
    expired: models.QuerySet[Job], using: str, batch_size: int, keep_waited_on: bool = False
) -> int:
    with write_transaction(using):
        ids = list(
            expired.select_for_update(skip_locked=True).values_list("pk", flat=True)[:batch_size]
        )
        if keep_waited_on and ids:
            waited_on = set(
                JobDependency.objects.using(using)
                .filter(depends_on_id__in=ids, job__status__in=UNFINISHED)
                .values_list("depends_on_id", flat=True)
            )
            ids = [job_id for job_id in ids if job_id not in waited_on]
        if not ids:
            return 0
        # Jobs, not the dependency rows that go with them.
        deleted = Job.objects.using(using).filter(pk__in=ids).delete()[1].get(Job._meta.label, 0)
    signals.send(signals.jobs_pruned, Job, job_ids=ids, using=using)
    return int(deleted)
