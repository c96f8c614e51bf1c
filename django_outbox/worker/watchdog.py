"""Noticing handlers that run too long: stack traces of stuck jobs, and attempts timed out.

Python cannot stop a thread from outside, so neither limit interrupts a handler. A job past its
task's ``max_execute_time`` has its thread's stack logged at ERROR (again after each further
``max_execute_time``) and ``job_stuck`` sent: where it hangs is in the log. A job past its task's
``timeout`` has its attempt recorded as failed (retried with backoff, or failed if it was the
last), its lease given up, and ``current_job().lease_lost`` set: the handler should notice and
return; whatever it does later is fenced off (an ``atomic=True`` handler's writes roll back).
Its thread stays busy until the handler returns. Both are checked at each heartbeat, so they
fire up to ``HEARTBEAT_SECONDS`` late.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback

from django.db import DatabaseError, connections

from .. import signals
from ..claimed import ClaimedJob
from ..db import queries_for
from ..exceptions import TimedOut
from ..jobs.transitions import Failure, record_failure
from ..retry import RetryPolicy
from ..tasks.registry import get_task
from .job_logs import log_job
from .runner import retry_delay

logger = logging.getLogger(__name__)


def stack_of(thread_ident: int | None) -> str:
    """Return the current stack of the thread ``thread_ident``, or "" if it has ended."""
    frame = sys._current_frames().get(thread_ident) if thread_ident is not None else None
    return "".join(traceback.format_stack(frame)) if frame is not None else ""


def watch(
    running: list[ClaimedJob], *, using: str, history_limit: int, fallback: RetryPolicy
) -> None:
    """Check the running jobs of one worker against their tasks' limits."""
    now = time.monotonic()
    for job in running:
        if job.handler_started is None or job.handler_done:
            continue
        try:
            task = get_task(job.task_name)
        except LookupError:
            continue
        elapsed = now - job.handler_started
        if task.timeout is not None and elapsed > task.timeout and not job.lease_lost:
            _time_out(job, task.timeout, elapsed, using, history_limit, fallback)
        elif task.max_execute_time is not None and _stuck_to_report(
            job, now, elapsed, task.max_execute_time
        ):
            job.stuck_reported_at = now
            stack = stack_of(job.thread_ident)
            log_job(
                logger,
                logging.ERROR,
                job,
                "stuck",
                "running longer than max_execute_time seconds=%.1f max_execute_time=%s; its "
                "thread's stack:\n%s",
                elapsed,
                task.max_execute_time,
                stack or "(the thread has ended)",
            )
            signals.send(signals.job_stuck, task, job=job, seconds=elapsed, stack=stack)


def _stuck_to_report(job: ClaimedJob, now: float, elapsed: float, limit: float) -> bool:
    """Whether ``job``, ``elapsed`` seconds in, is past ``limit`` and not reported for
    ``limit`` seconds."""
    if elapsed <= limit:
        return False
    return job.stuck_reported_at is None or now - job.stuck_reported_at > limit


#: How long the watchdog waits for row locks to record a timeout (a handler's own transaction
#: may hold them, SQLite's write lock too); the runner records it when the handler ends instead.
RECORD_LOCK_WAIT = 1.0


def _time_out(
    job: ClaimedJob,
    timeout: float,
    elapsed: float,
    using: str,
    history_limit: int,
    fallback: RetryPolicy,
) -> None:
    """Give up ``job``'s attempt: tell the handler (``lease_lost``), and record the failure now
    if the database lets us at once; else the runner records it when the handler returns."""
    job.timed_out_stack = f"The handler's stack when it timed out:\n{stack_of(job.thread_ident)}"
    job.timed_out = (
        f"The attempt ran {elapsed:.1f} s, longer than the task's timeout ({timeout} s)."
    )
    job.mark_lease_lost()
    error = TimedOut(job.timed_out)
    retry_in, _note = retry_delay(get_task(job.task_name), job, error, fallback)
    connection = connections[using]
    try:
        with queries_for(connection).lock_wait(connection, RECORD_LOCK_WAIT):
            status = record_failure(
                job_id=job.id,
                lease_token=job.lease_token,
                attempt=job.attempts,
                worker_id=job.worker_id,
                failure=Failure(
                    error=f"TimedOut: {job.timed_out}",
                    traceback=job.timed_out_stack,
                    retry_in=retry_in,
                ),
                history_limit=history_limit,
                using=using,
            )
    except DatabaseError as exc:
        log_job(
            logger, logging.WARNING, job, "timed out", "recorded when its handler returns (%s)", exc
        )
        return
    if status is not None:
        log_job(
            logger,
            logging.ERROR,
            job,
            "timed out",
            "seconds=%.1f timeout=%s; recorded as %s",
            elapsed,
            timeout,
            status,
        )
