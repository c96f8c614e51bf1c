"""A worker's housekeeping threads: heartbeats and rescues, the watchdog, pruning, and cron.

They run on connections of their own and outlive database errors: a run of failures is logged
once (``ErrorBackoff``) and the thread goes on after a pause, with a new connection.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from ..cron.scheduler import CronScheduler
from ..db import queries_for, retry_while_locked
from ..db.base import worker_lock_wait_seconds
from ..db.outage import ErrorBackoff
from ..jobs.transitions import extend_leases, prune_finished, rescue_expired_leases
from ..limits.pruning import prune_idle_limits
from ..retry import RetryPolicy
from .health import HEARTBEAT
from .held_jobs import HeldJobs
from .job_logs import log_job
from .watchdog import watch

if TYPE_CHECKING:
    from ..claimed import ClaimedJob
    from .health import WorkerHealth
    from .registration import Registration

logger = logging.getLogger(__name__)

#: How often the pruner deletes the limits' rows that hold nothing (``limits.pruning``).
PRUNE_LIMITS_EVERY_SECONDS = 600.0
#: The pruner runs at most this often (or every heartbeat, if that is longer).
PRUNE_EVERY_SECONDS = 1.0


class Maintenance:
    """Extend this worker's leases, take back other workers' expired ones, prune old jobs."""

    def __init__(
        self,
        *,
        using: str,
        worker_id: str,
        held: HeldJobs,
        lease_seconds: float,
        heartbeat_seconds: float,
        history_limit: int,
        retention: dict[str, float | None],
        done: threading.Event,
        fallback: RetryPolicy | None = None,
        cron: CronScheduler | None = None,
        health: WorkerHealth | None = None,
        registration: Registration | None = None,
    ) -> None:
        self.using = using
        self.worker_id = worker_id
        self.held = held
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.history_limit = history_limit
        self.retention = retention
        # The first pruning deletes the limits' idle rows; later ones every so often.
        self._next_limits_prune = 0.0
        # The retry policy of jobs whose task this worker does not know (for timeouts).
        self.fallback = fallback or RetryPolicy()
        # Set when the worker has stopped: these threads end and close their connections.
        self.done = done
        # Enqueues cron entries' ticks; None when there are none (no thread, no queries).
        self.cron = cron
        # Told whether the heartbeat reaches the database; and the worker's registry row,
        # written after each heartbeat's own work.
        self.health = health
        self.registration = registration
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        # Finished jobs are kept for hours or days: pruning more often than every
        # PRUNE_EVERY_SECONDS would only add statements to an idle worker's load.
        prune_every = max(self.heartbeat_seconds, PRUNE_EVERY_SECONDS)
        for name, what, work, max_delay, source, every in (
            ("outbox-heartbeat", "heartbeat", self._beat, 10.0, HEARTBEAT, self.heartbeat_seconds),
            (
                "outbox-watchdog",
                "watching running jobs",
                self._watch,
                10.0,
                None,
                self.heartbeat_seconds,
            ),
            (
                "outbox-pruner",
                "pruning finished jobs",
                self._prune_batches,
                60.0,
                None,
                prune_every,
            ),
        ):
            thread = threading.Thread(
                target=self._repeat,
                args=(what, work, max_delay, source, every),
                name=name,
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        if self.cron is not None:
            # Its own thread and connection: it wakes at ticks, not at heartbeats.
            thread = threading.Thread(target=self.cron.run, name="outbox-cron", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _repeat(
        self,
        what: str,
        work: Callable[[], None],
        max_delay: float,
        source: str | None,
        every: float,
    ) -> None:
        """Call ``work`` every ``every`` seconds until the worker stops, riding out database
        errors.

        Its errors and successes count in the worker's health as ``source``'s, if given.
        """
        connection = connections[self.using]
        errors = ErrorBackoff(
            f"{what} worker={self.worker_id}",
            logger,
            first_delay=self.heartbeat_seconds,
            max_delay=max_delay,
            health=self.health if source else None,
            source=source or "",
        )
        wait = every
        try:
            while not self.done.wait(wait):
                try:
                    work()
                except DatabaseError as exc:
                    connection.close()
                    wait = errors.failed(exc)
                else:
                    errors.succeeded()
                    wait = every
        finally:
            connection.close()

    # Heartbeat and rescue.

    def _bound_lock_waits(self) -> None:
        """Let no statement of this thread wait long for a lock (``worker_lock_wait_seconds``)."""
        connection = connections[self.using]
        queries_for(connection).bound_lock_waits(
            connection, worker_lock_wait_seconds(self.heartbeat_seconds), self.worker_id
        )

    def _beat(self) -> None:
        connection = connections[self.using]
        queries_for(connection).prepare_worker_connection(connection)
        self._bound_lock_waits()
        self._extend_leases()
        self.rescue()
        if self.health is not None:
            # Before the registry's row is written, so that it says the heartbeat works.
            self.health.succeeded(HEARTBEAT)
        if self.registration is not None:
            # Last, and catching its own errors: the registry never holds up the leases. The
            # first beat registers the worker: not at once, as a write while the first jobs
            # start makes SQLite's write lock busier just then (test_stop_signals.py).
            self.registration.beat()

    def _watch(self) -> None:
        running = self.held.running()
        if running:
            # Only then: an idle worker's watchdog needs no connection.
            self._bound_lock_waits()
        # On a thread of its own: on SQLite a handler's open transaction can keep the
        # heartbeat's writes waiting for the write lock as long as that handler runs.
        watch(
            running,
            using=self.using,
            history_limit=self.history_limit,
            fallback=self.fallback,
        )

    def _extend_leases(self) -> None:
        held = self.held.all()
        if not held:
            return
        heartbeat = retry_while_locked(
            partial(extend_leases, held, self.lease_seconds, self.using),
            give_up_after=self.heartbeat_seconds,
            stopping=self.done.is_set,
        )
        for job in held:
            if job.id in heartbeat.lost and not job.handler_done:
                log_job(logger, logging.WARNING, job, "lease lost")
                job.mark_lease_lost()
            elif job.id in heartbeat.cancel_requested and not job.cancel_requested:
                log_job(logger, logging.WARNING, job, "cancel requested")
                job.mark_cancel_requested()
            elif job.id in heartbeat.locked:
                self._row_locked(job, expired=job.id in heartbeat.expired)
            elif job.row_locked_since is not None:
                log_job(
                    logger,
                    logging.WARNING if job.row_lock_reported else logging.DEBUG,
                    job,
                    "row free again",
                    "lease extended after %.1fs locked by another transaction",
                    time.monotonic() - job.row_locked_since,
                )
                job.row_locked_since = None
                job.row_lock_reported = False
                job.expiry_reported = False

    def _row_locked(self, job: ClaimedJob, *, expired: bool) -> None:
        """Tell that another transaction holds ``job``'s row, so its lease was not extended.

        Only the lease of that job waits: the others were extended. Once its lease has run out
        the job is at risk of a second run (a worker whose registration went stale may take it
        back), which is logged as an error and shown as the worker's last error (in
        ``outbox_health`` and on the dashboard), but does not make the worker unhealthy:
        restarting it would not free the row.
        """
        now = time.monotonic()
        if job.row_locked_since is None:
            # Most often the job's own transaction, committing its success as the beat passes
            # (an atomic job's row is locked by its handler's transaction): not worth a warning
            # until the lock outlasts a heartbeat interval.
            job.row_locked_since = now
        if not job.row_lock_reported and now - job.row_locked_since >= self.heartbeat_seconds:
            job.row_lock_reported = True
            log_job(
                logger,
                logging.WARNING,
                job,
                "row locked",
                "another transaction has held the job's row for %.0fs; its lease is extended "
                "once it is free",
                now - job.row_locked_since,
            )
        if expired and not job.expiry_reported:
            job.expiry_reported = True
            message = (
                f"Job {job.id}'s row has been locked by another transaction for "
                f"{now - job.row_locked_since:.0f}s, past its lease: its lease is extended once "
                "the row is free (look for a long transaction or a SELECT ... FOR UPDATE on "
                "the job table)."
            )
            log_job(logger, logging.ERROR, job, "lease expired while its row was locked")
            if self.health is not None:
                self.health.noted(message)

    def rescue(self, stopping: Callable[[], bool] | None = None) -> None:
        """Take back the expired leases of jobs this worker does not hold.

        ``stopping``: while it returns True, a locked database is not waited for (default:
        this thread's own end).
        """
        # Read after extending: a job claimed since is in the list, and one claimed between
        # the two reads has a fresh lease anyway.
        rescued = retry_while_locked(
            lambda: rescue_expired_leases(
                self.using,
                self.history_limit,
                held_tokens=self.held.tokens(),
                abandoned_tokens=self.held.abandoned_tokens(),
                worker_id=self.worker_id,
            ),
            give_up_after=self.heartbeat_seconds,
            stopping=stopping or self.done.is_set,
        )
        if rescued:
            logger.warning(
                "took back jobs with expired leases count=%s worker=%s", rescued, self.worker_id
            )

    # Pruning.

    def _prune_batches(self) -> None:
        """Delete finished jobs past their retention, in small batches; and, every
        ``PRUNE_LIMITS_EVERY_SECONDS``, the limits' rows that hold nothing."""
        self._bound_lock_waits()
        if time.monotonic() >= self._next_limits_prune:
            self._next_limits_prune = time.monotonic() + PRUNE_LIMITS_EVERY_SECONDS
            retry_while_locked(
                partial(prune_idle_limits, self.using),
                give_up_after=self.heartbeat_seconds,
                stopping=self.done.is_set,
            )
        while not self.done.is_set():
            deleted = retry_while_locked(
                partial(prune_finished, self.using, self.retention),
                give_up_after=self.heartbeat_seconds,
                stopping=self.done.is_set,
            )
            if not deleted:
                return
            logger.info("pruned finished jobs count=%s", deleted)
            # Let claims and completions in between batches.
            time.sleep(0.05)
