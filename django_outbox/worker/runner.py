"""Running one claimed job: the handler, its transaction, and the status it ends in."""

from __future__ import annotations

import enum
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from django.db import connections, transaction
from django.dispatch import Signal

from .. import signals
from ..claimed import ClaimedJob, reset_current_job, set_current_job
from ..db import queries_for, retry_while_locked
from ..django_task_jobs import TASK_NAMES as DJANGO_TASK_NAMES
from ..exceptions import (
    BrokenTransactionError,
    Halt,
    LeaseLostError,
    RateLimited,
    Snooze,
    TaskNotRegisteredError,
    TimedOut,
)
from ..jobs.context_variables import restored
from ..jobs.transitions import (
    Failure,
    cancel_was_requested,
    deleted_jobs,
    mark_succeeded,
    record_cancelled,
    record_failure,
    record_halt,
    record_snooze,
)
from ..limits.pauses import PER, pause
from ..models import JobStatus
from ..retry import RetryPolicy, decision_delay
from ..tasks.base import Task
from ..tasks.registry import get_task, registered_names
from ..validation.bounds import snooze_error
from .job_logs import log_job

logger = logging.getLogger(__name__)

#: How long an atomic job is run again, within its attempt, while SQLite reports the database
#: locked, before the lock error counts as the attempt's failure.
LOCKED_RETRY_SECONDS = 10.0

T = TypeVar("T")

BROKEN_TRANSACTION = (
    "The handler caught a database error inside the job's transaction without rolling back to "
    "a savepoint, so the transaction can only roll back: this attempt failed and none of its "
    "writes were kept. To go on after a statement that may fail (an IntegrityError, say), run "
    "that statement in its own `with transaction.atomic():` block and catch the error outside "
    "it."
)


class Outcome(enum.Enum):
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    FAILED = "failed"
    # Another worker owns the job now; this attempt changed nothing.
    LEASE_LOST = "lease_lost"
    # The handler raised Snooze: ready again later, the run not counted as an attempt.
    SNOOZED = "snoozed"
    # The handler raised Halt: waiting for resume().
    HALTED = "halted"
    # cancel() was called while the job was claimed.
    CANCELLED = "cancelled"


class CancelRequested(Exception):
    """Raised after an atomic job's handler returned, to roll its writes back: cancel() won."""


class UndecodablePayload(Exception):
    """The job's stored payload cannot be decoded: a retry would meet the same data."""


def retry_delay(
    task: Task | None, job: ClaimedJob, exc: BaseException, fallback: RetryPolicy
) -> tuple[float | None, str]:
    """Return (seconds until the next attempt or None to fail now, a note for the error text)."""
    if isinstance(exc, UndecodablePayload):
        return None, "not retried: retrying cannot change the stored data."
    if job.attempts >= job.max_attempts:
        return None, ""
    if task is None:
        return fallback.delay(job.attempts), ""
    if isinstance(exc, task.give_up_on):
        return None, f"{type(exc).__name__} is in give_up_on: not retried."
    note = ""
    if task.retry_strategy is not None:
        try:
            decision = decision_delay(
                task.retry_strategy(job, exc), f"retry_strategy of {task.name}"
            )
        except Exception as strategy_error:
            log_job(logger, logging.ERROR, job, "retry_strategy failed", exc_info=True)
            decision = None
            note = f"retry_strategy raised {strategy_error!r}; used the default backoff."
        if decision == "give_up":
            return None, "retry_strategy gave up."
        if decision is not None:
            return float(decision), note
    return task.retry_policy_for(job.queue).delay(job.attempts), note


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def run_job(
    job: ClaimedJob,
    *,
    using: str,
    history_limit: int,
    fallback: RetryPolicy,
    complete_later: Callable[[ClaimedJob], None] | None = None,
) -> Outcome | None:
    """Run ``job``'s handler and record how it ended. Never raise for the handler's errors.

    With ``complete_later``, an ``atomic=False`` job whose handler returned is passed to it
    (to be marked succeeded in a batch, then reported with ``report_succeeded``) and None is
    returned. ``atomic=True`` jobs always commit their success with the handler's writes.
    The context variables captured at enqueue (``OUTBOX["CONTEXT"]``) are set meanwhile.
    """
    if job.stored_context is None:
        return _run_job(job, using, history_limit, fallback, complete_later)
    with restored(job.decode_context()):
        return _run_job(job, using, history_limit, fallback, complete_later)


def _run_job(
    job: ClaimedJob,
    using: str,
    history_limit: int,
    fallback: RetryPolicy,
    complete_later: Callable[[ClaimedJob], None] | None,
) -> Outcome | None:
    try:
        task: Task | None = get_task(job.task_name)
    except LookupError:
        task = None
    log_job(logger, logging.DEBUG, job, "started")
    signals.send(signals.job_started, task, job=job)
    if task is None:
        error = TaskNotRegisteredError(
            f"No task named {job.task_name!r} is registered in this worker (renamed or removed, "
            "or a job of another service?). It retries with backoff in case a worker that knows "
            f"it (a newer deploy) takes it. Registered: {', '.join(registered_names()) or 'none'}."
        )
        log_job(
            logger,
            logging.ERROR,
            job,
            "of an unknown task",
            "max_attempts=%s: most likely the code that enqueues it was deployed before this "
            "worker's (deploy workers first), or the task was renamed or removed while jobs of "
            "it were pending; it retries with backoff",
            job.max_attempts,
        )
        return _fail(job, None, error, "", using, history_limit, fallback)

    if job.cancel_requested:
        # Cancelled while it waited in this worker (prefetched): it never starts.
        return _cancel(job, task, using, "The handler never started.", history_limit)

    try:
        job.decode_payload()
        if (codec := task.codec) is not None:
            job.payload = codec.decode(job.payload)
    except Exception as exc:
        undecodable = UndecodablePayload(
            f"The stored payload of job {job.id} cannot be decoded ({_describe(exc)}); it was "
            "written by other code than enqueue() or edited by hand. Fix the payload and retry "
            "the job."
        )
        undecodable.__cause__ = exc
        trace = "".join(traceback.format_exception(exc))
        return _fail(job, task, undecodable, trace, using, history_limit, fallback)

    context = set_current_job(job)
    job.thread_ident = threading.get_ident()
    job.handler_started = time.monotonic()
    try:
        if task.atomic:
            # SQLite refuses a deferred transaction's upgrade to the write lock while another
            # connection writes ("database is locked", at once, whatever the busy timeout).
            # The attempt's writes were rolled back, so run it again within the attempt rather
            # than spend attempts on contention.
            retry_while_locked(
                lambda: _run_atomic(task, job, using),
                give_up_after=LOCKED_RETRY_SECONDS,
                stopping=lambda: job.lease_lost,
            )
        else:
            try:
                job.result = task.run(job.payload)
            finally:
                job.handler_done = True
            if job.cancel_requested:
                raise CancelRequested
            if job.timed_out is not None:
                raise TimedOut(job.timed_out)
            if complete_later is not None:
                complete_later(job)
                return None
            if not mark_succeeded(job, using):
                _raise_cancelled_or_lost(job, using, "its effects are not undone")
    except LeaseLostError as lost:
        log_job(logger, logging.WARNING, job, "lease lost", "%s", lost)
        return Outcome.LEASE_LOST
    except BaseException as exc:
        job.error = exc
        # However the handler ended, a cancel request seen meanwhile decides the outcome.
        if job.cancel_requested:
            return _cancel(job, task, using, _cancel_note(task, job), history_limit)
        if isinstance(exc, Snooze):
            return _snooze(job, task, exc, using, history_limit, fallback)
        if isinstance(exc, RateLimited):
            return _rate_limited(job, task, exc, using, history_limit, fallback)
        if isinstance(exc, Halt):
            return _halt(job, task, exc, using)
        if job.timed_out is not None:
            # Past its timeout the attempt has failed, whatever the handler raised since;
            # where it was when it timed out says more than where it ended.
            timed_out = TimedOut(job.timed_out)
            return _fail(job, task, timed_out, job.timed_out_stack, using, history_limit, fallback)
        return _fail(job, task, exc, traceback.format_exc(), using, history_limit, fallback)
    finally:
        reset_current_job(context)
    report_succeeded(job, task)
    return Outcome.SUCCEEDED


def _run_atomic(task: Task, job: ClaimedJob, using: str) -> None:
    """Run the handler with the success mark in one transaction; raise to roll both back."""
    connection = connections[using]
    job.handler_done = False
    with transaction.atomic(using=using):
        try:
            job.result = task.run(job.payload)
        finally:
            job.handler_done = True
        if queries_for(connection).transaction_broken(connection):
            raise BrokenTransactionError(BROKEN_TRANSACTION)
        if job.cancel_requested:
            raise CancelRequested
        if job.timed_out is not None:
            raise TimedOut(job.timed_out)
        # If the lease was lost meanwhile, or a cancel request committed while the success
        # mark waited for the row (cancel() in a caller's open transaction), raising rolls
        # back the handler's writes too.
        if not mark_succeeded(job, using):
            _raise_cancelled_or_lost(job, using, "before it could commit")


def _raise_cancelled_or_lost(job: ClaimedJob, using: str, what: str) -> NoReturn:
    """The success mark changed nothing: raise CancelRequested if cancel() asked ``job`` to
    stop (its attempt ends cancelled), else LeaseLostError."""
    if cancel_was_requested(job, using):
        job.mark_cancel_requested()
        raise CancelRequested
    if deleted_jobs([job.id], using):
        raise LeaseLostError(f"Job {job.id} was deleted while it ran: nothing recorded, {what}.")
    raise LeaseLostError(f"Job {job.id} lost its lease {what}.")


def report_cancelled(job: ClaimedJob) -> None:
    """Log the cancellation of ``job`` recorded by the completer, and send ``job_cancelled``."""
    with restored(job.context):
        report(job, get_task(job.task_name), Outcome.CANCELLED)


def report_succeeded(job: ClaimedJob, task: Task | None = None) -> None:
    """Log the success of ``job`` and send ``job_succeeded``, once it is recorded."""
    if task is None:
        task = get_task(job.task_name)
    with restored(job.context):
        report(job, task, Outcome.SUCCEEDED)


@dataclass(frozen=True)
class _Told:
    """How an outcome is told once it is recorded: its log line and its signal."""

    level: int
    event: str
    signal: Signal


_TOLD = {
    Outcome.SUCCEEDED: _Told(logging.INFO, "succeeded", signals.job_succeeded),
    Outcome.RETRYING: _Told(logging.WARNING, "will retry", signals.job_retrying),
    Outcome.FAILED: _Told(logging.ERROR, "failed", signals.job_failed),
    Outcome.SNOOZED: _Told(logging.INFO, "snoozed", signals.job_snoozed),
    Outcome.HALTED: _Told(logging.INFO, "halted", signals.job_halted),
    Outcome.CANCELLED: _Told(logging.WARNING, "cancelled", signals.job_cancelled),
}


def report(
    job: ClaimedJob,
    task: Task | None,
    outcome: Outcome,
    details: str = "",
    *args: Any,
    **sent: Any,
) -> Outcome:
    """Log ``outcome`` of ``job`` (``details % args`` after its fields) and send its signal with
    ``sent``; return the outcome. Call once the outcome is recorded."""
    told = _TOLD[outcome]
    # The record names the function that reported, not this one.
    log_job(logger, told.level, job, told.event, details, *args, stacklevel=3)
    signals.send(told.signal, task, job=job, **sent)
    return outcome


def _fail(
    job: ClaimedJob,
    task: Task | None,
    exc: BaseException,
    trace: str,
    using: str,
    history_limit: int,
    fallback: RetryPolicy,
) -> Outcome:
    retry_in, note = retry_delay(task, job, exc, fallback)
    error = _describe(exc) + (f" ({note})" if note else "")
    if job.task_name in DJANGO_TASK_NAMES:
        # Django's TaskResult.errors lists every failed attempt; the backend bounds a Django
        # task's attempts (ERROR_HISTORY_MAX), so keeping them all stays bounded.
        history_limit = max(history_limit, job.max_attempts)
    failure = Failure(error=error, traceback=trace, retry_in=retry_in)
    status = _recorded(
        job,
        lambda: record_failure(
            job_id=job.id,
            lease_token=job.lease_token,
            attempt=job.attempts,
            worker_id=job.worker_id,
            failure=failure,
            history_limit=history_limit,
            using=using,
        ),
    )
    if status is None:
        log_job(logger, logging.WARNING, job, "lease lost", "failure not recorded: %s", error)
        return Outcome.LEASE_LOST
    if status == JobStatus.RETRYING:
        details = "retry_in=%.1fs error=%s"
        return report(job, task, Outcome.RETRYING, details, retry_in, error, error=error)
    return report(job, task, Outcome.FAILED, "error=%s", error, error=error)


def _recorded(job: ClaimedJob, write: Callable[[], T]) -> T:
    """Run ``write``, an outcome's short transaction, again while the database says it met a
    lock (SQLite's busy write lock, a MariaDB deadlock): it rolled back whole, and the outcome
    is the attempt's, which a lease left to expire would cost."""
    return retry_while_locked(
        write, give_up_after=LOCKED_RETRY_SECONDS, stopping=lambda: job.lease_lost
    )


def _lease_held(job: ClaimedJob, recorded: bool, what: str) -> bool:
    """Whether ``what`` was recorded; if not, the lease was lost, which is logged."""
    if not recorded:
        log_job(logger, logging.WARNING, job, "lease lost", "%s not recorded", what)
    return recorded


def _snooze(
    job: ClaimedJob,
    task: Task,
    snooze: Snooze,
    using: str,
    history_limit: int,
    fallback: RetryPolicy,
) -> Outcome:
    if problem := snooze_error(snooze.seconds):
        error = ValueError(f"{task.name} raised Snooze({snooze.seconds!r}): {problem}")
        trace = "".join(traceback.format_exception(snooze))
        return _fail(job, task, error, trace, using, history_limit, fallback)
    seconds = float(snooze.seconds)
    if not _lease_held(job, _recorded(job, lambda: record_snooze(job, seconds, using)), "snooze"):
        return Outcome.LEASE_LOST
    return report(job, task, Outcome.SNOOZED, "seconds=%g", seconds, seconds=seconds)


def _rate_limited(
    job: ClaimedJob,
    task: Task,
    limited: RateLimited,
    using: str,
    history_limit: int,
    fallback: RetryPolicy,
) -> Outcome:
    """Pause the limit the handler named, and snooze the job until the pause ends."""
    problem = snooze_error(limited.retry_after)
    if problem is None and limited.per is not None and limited.per not in PER:
        problem = f"per must be one of {PER} or None, not {limited.per!r}."
    if problem:
        error = ValueError(f"{task.name} raised RateLimited({limited.retry_after!r}): {problem}")
        trace = "".join(traceback.format_exception(limited))
        return _fail(job, task, error, trace, using, history_limit, fallback)
    seconds = float(limited.retry_after)
    scope = pause(using, job, seconds, limited.per)
    if not _lease_held(
        job, _recorded(job, lambda: record_snooze(job, seconds, using)), "rate limit"
    ):
        return Outcome.LEASE_LOST
    return report(
        job, task, Outcome.SNOOZED, "rate_limited=%s seconds=%g", scope, seconds, seconds=seconds
    )


def _halt(job: ClaimedJob, task: Task, halt: Halt, using: str) -> Outcome:
    reason = halt.reason if isinstance(halt.reason, str) else repr(halt.reason)
    if not _lease_held(job, _recorded(job, lambda: record_halt(job, reason, using)), "halt"):
        return Outcome.LEASE_LOST
    return report(job, task, Outcome.HALTED, "reason=%s", reason, reason=reason)


def _cancel_note(task: Task, job: ClaimedJob) -> str:
    """What became of an attempt cancelled while it ran, for the job's history."""
    if not job.handler_done:
        return "The handler was stopped."
    if task.atomic:
        return "The handler had returned; its writes were rolled back."
    return "The handler had returned (atomic=False): its effects stand."


def _cancel(
    job: ClaimedJob, task: Task | None, using: str, note: str, history_limit: int
) -> Outcome:
    recorded = _recorded(job, lambda: record_cancelled(job, using, note, history_limit))
    if not _lease_held(job, recorded, "cancellation"):
        return Outcome.LEASE_LOST
    return report(job, task, Outcome.CANCELLED)
