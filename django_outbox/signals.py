"""Lifecycle signals. The worker sends the job_* ones after the job's new status is committed.

Each is sent with ``sender`` the Task (None for a job whose task is not registered) and
``job`` the ClaimedJob. ``job_failed`` and ``job_retrying`` also pass ``error`` (text).
``job_enqueued`` is sent by enqueue, inside the caller's transaction (``job`` the Job);
``worker_started``, ``worker_stopped``, ``worker_unhealthy`` and ``worker_recovered`` by a
worker (``sender`` the Worker class, ``worker`` the Worker). A receiver that raises is logged
and changes nothing about the job or the worker.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger(__name__)

#: A job was written by enqueue or enqueue_many (once per job), inside the caller's
#: transaction, before it commits: a rollback undoes the job the signal announced.
job_enqueued = Signal()
#: A worker is about to claim its first jobs; and it has stopped (``stats``, its WorkerStats).
worker_started = Signal()
worker_stopped = Signal()
#: A worker has been in error (its claims or heartbeats failing with database errors) longer
#: than OUTBOX["HEALTH"]["ALLOWED_ERROR_SECONDS"] (and is past its GRACE_SECONDS): ``seconds``
#: in error so far, ``error`` the latest one's first line. Sent once, by the thread that saw it.
worker_unhealthy = Signal()
#: A worker that was unhealthy works again (its claims and heartbeats succeed).
worker_recovered = Signal()
job_started = Signal()
job_succeeded = Signal()
job_retrying = Signal()
job_failed = Signal()
#: The handler raised Snooze; ``seconds`` until the job is due again.
job_snoozed = Signal()
#: The handler raised Halt; ``reason`` is its text.
job_halted = Signal()
#: The job ended as cancelled in a worker (cancel() was called while it was claimed). A job
#: cancelled before any worker claimed it sends nothing: no worker saw it.
job_cancelled = Signal()
#: The handler has run longer than its task's max_execute_time: ``seconds`` so far, and
#: ``stack``, its thread's stack (text). Sent by the heartbeat, again each max_execute_time.
job_stuck = Signal()
#: Finished jobs were deleted by retention pruning (the worker's pruner, ``outbox_prune``):
#: ``job_ids``, the ids deleted (a batch), and ``using``, their database. Sent after the
#: deletion committed; the admin deletes its log entries of those jobs.
jobs_pruned = Signal()


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; log, and otherwise ignore, the ones that raise.

    The job's status is already committed when these are sent: a failing receiver must not
    make the worker lose track of the job, nor stop the thread that reports it.
    """
    for receiver, result in signal.send_robust(sender=sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "a signal receiver failed receiver=%s job=%s",
                getattr(receiver, "__qualname__", receiver),
                getattr(kwargs.get("job"), "id", None),
                exc_info=result,
            )
