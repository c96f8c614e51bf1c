"""The worker: claims jobs and runs them in threads, each with its own database connection.

One thread (the caller's) claims as many jobs as there are free threads (plus ``PREFETCH``) in
one statement, and hands them over through a local queue. It sleeps until a job finishes, an
enqueue is announced (NOTIFY on PostgreSQL, this process's own enqueues on SQLite) or the poll
interval passes. Other threads: a heartbeat that extends the leases of every job the worker
holds and tells handlers whose lease was lost; a completer that marks ``atomic=False`` jobs
succeeded in batches; a listener (PostgreSQL); a pruner of old finished jobs.
``run_outbox_worker`` is a thin command around this class; tests drive it directly.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType

from django.db import DatabaseError, connections

from . import wakeups
from .completer import Completer
from .conf import get_settings
from .context import ClaimedJob
from .db import queries_for, retry_while_locked
from .retry import RetryPolicy
from .runner import Outcome, report_succeeded, run_job
from .transitions import (
    Failure,
    extend_leases,
    prune_finished,
    record_failure,
    release,
    rescue_expired_leases,
)

logger = logging.getLogger("django_outbox.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class WorkerStats:
    """What a worker did, by outcome."""

    claimed: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)

    def __str__(self) -> str:
        parts = ", ".join(
            f"{self.outcomes[outcome]} {outcome.value.replace('_', ' ')}" for outcome in Outcome
        )
        return f"{self.claimed} claimed: {parts}"


class Worker:
    """Run jobs of ``queues`` (all when empty) on ``concurrency`` threads until stopped."""

    def __init__(
        self,
        *,
        queues: Sequence[str] = (),
        concurrency: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        shutdown_timeout: float | None = None,
        worker_id: str | None = None,
        prefetch: int | None = None,
    ) -> None:
        outbox = get_settings()
        self.using = outbox.database
        self.queues = list(queues)
        self.concurrency = concurrency or outbox.concurrency
        self.burst = burst
        self.max_jobs = max_jobs
        self.shutdown_timeout = (
            outbox.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
        )
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = outbox.lease_seconds
        self.heartbeat_seconds = outbox.heartbeat_seconds
        self.poll_seconds = outbox.poll_seconds
        self.history_limit = outbox.error_history
        self.retention = outbox.retention
        self.fallback_policy = RetryPolicy.from_setting(outbox.retry)
        self.prefetch = outbox.prefetch if prefetch is None else prefetch
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1.")
        if self.prefetch < 0:
            raise ValueError("prefetch must be at least 0.")
        if max_jobs is not None and max_jobs < 1:
            raise ValueError("max_jobs must be at least 1.")
        # Jobs held at most: one per thread, plus those claimed ahead.
        self.capacity = self.concurrency + self.prefetch
        # A busy worker claims again once this many places are free, so that claims stay
        # batched; without prefetch, as soon as one thread is free.
        self.claim_threshold = max(1, self.prefetch // 2)

        self.stats = WorkerStats()
        # Jobs this worker holds a lease on: claimed and waiting, running, or finished and
        # waiting for the completer to record them.
        self._held: dict[int, ClaimedJob] = {}
        self._started: set[int] = set()
        self._completing: set[int] = set()
        self._lock = threading.Lock()
        self._ready: queue.Queue[ClaimedJob | None] = queue.Queue()
        self._wake = threading.Event()
        # Whether a finished job should wake the loop at once rather than at its next poll.
        self._wake_on_completion = True
        self._stopping = threading.Event()
        self._aborting = threading.Event()
        self._heartbeat_done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._completer = Completer(self.using, self._record_completed)

    # Control, callable from signal handlers and other threads.

    def request_stop(self) -> None:
        """Stop claiming, hand back unstarted jobs, let running ones finish; return at once."""
        if not self._stopping.is_set():
            logger.info("worker stopping worker=%s", self.worker_id)
        self._stopping.set()
        self._wake.set()

    def abort(self) -> None:
        """Stop waiting for running jobs: run() returns now; their leases will expire."""
        self._aborting.set()
        self.request_stop()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # The loop.

    def run(self) -> WorkerStats:
        """Claim and run jobs until stopped (or, with burst/max_jobs, until done)."""
        if connections[self.using].in_atomic_block:
            # The worker reconfigures and closes this thread's connection, and commits on it.
            raise RuntimeError(
                "Worker.run() was called inside an atomic block; run workers outside of "
                "transactions (e.g. from a thread or process of their own)."
            )
        queries = queries_for(connections[self.using])
        queries.prepare_worker_connection(connections[self.using])
        logger.info(
            "worker started worker=%s queues=%s concurrency=%s prefetch=%s",
            self.worker_id,
            ",".join(self.queues) or "*",
            self.concurrency,
            self.prefetch,
        )
        wakeups.subscribe(self._job_enqueued)
        self._start_threads(queries)
        next_rescue = 0.0
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                if time.monotonic() >= next_rescue:
                    self._rescue()
                    next_rescue = time.monotonic() + self.heartbeat_seconds
                free = self._free_slots()
                claimed = self._claim(queries, free) if free > 0 else []
                # A claim that found fewer jobs than it asked for left nothing runnable, and a
                # finished job adds none: claim again at the next poll, not at every completion.
                # Burst and max-jobs runs wait for completions to exit promptly.
                self._wake_on_completion = (
                    len(claimed) == free or self.burst or self._max_jobs_reached()
                )
                with self._lock:
                    idle = not self._held
                # Idle after a claim means the claim found nothing runnable.
                if idle and (self.burst or self._max_jobs_reached()):
                    break
                self._wake.wait(self.poll_seconds)
        finally:
            wakeups.unsubscribe(self._job_enqueued)
            self._shut_down()
        logger.info("worker stopped worker=%s %s", self.worker_id, self.stats)
        return self.stats

    def _max_jobs_reached(self) -> bool:
        return self.max_jobs is not None and self.stats.claimed >= self.max_jobs

    def _places_free(self) -> int:
        """How many jobs a claim may take now (call with the lock held).

        Jobs waiting for the completer don't take a thread, but they are held: should the
        completer fall behind (a slow database), stop claiming rather than pile them up.
        """
        waiting_or_running = len(self._held) - len(self._completing)
        return min(self.capacity - waiting_or_running, 2 * self.capacity - len(self._held))

    def _free_slots(self) -> int:
        with self._lock:
            free = self._places_free()
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.stats.claimed)
        return free

    def _claim(self, queries: ModuleType, limit: int) -> list[ClaimedJob]:
        try:
            jobs: list[ClaimedJob] = retry_while_locked(
                lambda: queries.claim(
                    connections[self.using], self.worker_id, self.queues, limit, self.lease_seconds
                ),
                stopping=self._stopping.is_set,
            )
        except DatabaseError:
            # The database went away or is busy beyond patience: keep the worker alive and retry
            # after a pause; the claim was one statement, so nothing is half-done.
            logger.exception(
                "claim failed worker=%s; retrying after %ss", self.worker_id, self.poll_seconds
            )
            connections[self.using].close()
            return []
        with self._lock:
            for job in jobs:
                self._held[job.id] = job
        self.stats.claimed += len(jobs)
        for job in jobs:
            self._ready.put(job)
        return jobs

    def _job_enqueued(self, queue: str) -> None:
        """Wake the loop for an enqueue to ``queue`` ("": unknown) that it may claim."""
        if queue and self.queues and queue not in self.queues:
            return
        with self._lock:
            # A busy worker whose completions will claim anyway waits for a batch's worth of
            # places: one wake per enqueue would make a claim per enqueue.
            if self._wake_on_completion and self._places_free() < self.claim_threshold:
                return
        self._wake.set()

    def _slot_freed(self) -> None:
        """Wake the loop when enough places are free for a batched claim (lock held)."""
        enough_free = self._places_free() >= self.claim_threshold
        # An empty worker in burst or max-jobs mode wakes to exit.
        if self._wake_on_completion and (enough_free or not self._held):
            self._wake.set()

    def _rescue(self) -> None:
        connection = connections[self.using]
        try:
            queries_for(connection).prepare_worker_connection(connection)
            rescued = retry_while_locked(
                lambda: rescue_expired_leases(
                    self.using, self.history_limit, alive_worker_id=self.worker_id
                ),
                stopping=self._stopping.is_set,
            )
        except DatabaseError:
            logger.exception("rescuing expired leases failed worker=%s", self.worker_id)
            connections[self.using].close()
            return
        if rescued:
            logger.warning(
                "took back jobs with expired leases count=%s worker=%s", rescued, self.worker_id
            )

    # Threads.

    def _start_threads(self, queries: ModuleType) -> None:
        for number in range(self.concurrency):
            thread = threading.Thread(
                target=self._execute_jobs, name=f"outbox-worker-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._completer.start()
        helpers = [("outbox-heartbeat", self._heartbeat), ("outbox-pruner", self._prune)]
        if queries.LISTENS:
            helpers.append(("outbox-listener", partial(self._listen, queries)))
        for name, target in helpers:
            threading.Thread(target=target, name=name, daemon=True).start()

    def _listen(self, queries: ModuleType) -> None:
        try:
            queries.listen(
                connections[self.using],
                self._job_enqueued,
                self._heartbeat_done,
                retry_seconds=self.poll_seconds,
            )
        except Exception:
            # Never fatal: the loop polls anyway.
            logger.exception("listener stopped worker=%s; polling only", self.worker_id)

    def _prune(self) -> None:
        """Delete finished jobs past their retention, in small batches, every heartbeat."""
        connection = connections[self.using]
        try:
            while not self._heartbeat_done.wait(self.heartbeat_seconds):
                try:
                    while not self._heartbeat_done.is_set():
                        deleted = retry_while_locked(
                            partial(prune_finished, self.using, self.retention),
                            give_up_after=self.heartbeat_seconds,
                        )
                        if not deleted:
                            break
                        logger.info("pruned finished jobs count=%s", deleted)
                        # Let claims and completions in between batches.
                        time.sleep(0.05)
                except DatabaseError:
                    logger.exception("pruning finished jobs failed worker=%s", self.worker_id)
                    connection.close()
        finally:
            connection.close()

    def _execute_jobs(self) -> None:
        connection = connections[self.using]
        try:
            queries_for(connection).prepare_worker_connection(connection)
            while True:
                job = self._ready.get()
                if job is None:
                    return
                with self._lock:
                    if self._stopping.is_set():
                        # Shutting down: the job goes back to the queue unstarted.
                        self._ready.put(job)
                        return
                    self._started.add(job.id)
                self._execute(job)
        finally:
            connection.close()

    def _execute(self, job: ClaimedJob) -> None:
        connection = connections[self.using]
        try:
            # A worker thread keeps its connection for its life (CONN_MAX_AGE is for requests);
            # only a broken one is replaced.
            connection.close_at = None
            connection.close_if_unusable_or_obsolete()
            queries_for(connection).prepare_worker_connection(connection)
            outcome = run_job(
                job,
                using=self.using,
                history_limit=self.history_limit,
                fallback=self.fallback_policy,
                complete_later=self._complete_later,
            )
        except Exception:
            # Recording the outcome failed (the database went away): the lease will expire and
            # the job will run again. Keep this thread alive for the next job.
            logger.exception("could not record the outcome job=%s task=%s", job.id, job.task_name)
            connection.close()
            outcome = Outcome.LEASE_LOST
        if outcome is None:
            # Handed to the completer (see _complete_later), which records the outcome.
            return
        with self._lock:
            self._held.pop(job.id, None)
            self._started.discard(job.id)
            self.stats.outcomes[outcome] += 1
            self._slot_freed()

    def _complete_later(self, job: ClaimedJob) -> None:
        """Free the thread now; the completer marks the job succeeded with others."""
        with self._lock:
            self._started.discard(job.id)
            self._completing.add(job.id)
            self._slot_freed()
        self._completer.add(job)

    def _record_completed(self, jobs: list[ClaimedJob], marked: set[int]) -> None:
        """Called by the completer once a batch is written."""
        with self._lock:
            for job in jobs:
                self._held.pop(job.id, None)
                self._completing.discard(job.id)
                outcome = Outcome.SUCCEEDED if job.id in marked else Outcome.LEASE_LOST
                self.stats.outcomes[outcome] += 1
            self._slot_freed()
        for job in jobs:
            if job.id in marked:
                report_succeeded(job)
            else:
                logger.warning(
                    "lease lost job=%s task=%s; it ran, but another worker owns it now",
                    job.id,
                    job.task_name,
                )

    def _heartbeat(self) -> None:
        connection = connections[self.using]
        try:
            while not self._heartbeat_done.wait(self.heartbeat_seconds):
                with self._lock:
                    held = list(self._held.values())
                if not held:
                    continue
                try:
                    lost = retry_while_locked(
                        partial(extend_leases, held, self.lease_seconds, self.using),
                        give_up_after=self.heartbeat_seconds,
                    )
                except DatabaseError:
                    logger.exception("heartbeat failed worker=%s", self.worker_id)
                    connection.close()
                    continue
                for job in held:
                    if job.id in lost and not job.handler_done:
                        logger.warning("lease lost job=%s task=%s", job.id, job.task_name)
                        job.mark_lease_lost()
        finally:
            connection.close()

    # Shutdown.

    def _shut_down(self) -> None:
        with self._lock:
            self._stopping.set()
        self._hand_back_unstarted()
        for _ in self._threads:
            self._ready.put(None)
        deadline = time.monotonic() + self.shutdown_timeout
        for thread in self._threads:
            while thread.is_alive() and not self._aborting.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                thread.join(min(remaining, 0.1))
        # Threads that saw the stop hand their job back through the queue.
        self._hand_back_unstarted()
        self._give_up_running()
        # Jobs whose handler returned are recorded before the worker goes.
        self._completer.stop(timeout=1.0 if self._aborting.is_set() else 30.0)
        self._heartbeat_done.set()
        connections[self.using].close()

    def _hand_back_unstarted(self) -> None:
        unstarted: list[ClaimedJob] = []
        while True:
            try:
                job = self._ready.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                unstarted.append(job)
        if not unstarted:
            return
        try:
            retry_while_locked(lambda: release(unstarted, self.using), give_up_after=5)
        except DatabaseError:
            logger.exception("could not hand back unstarted jobs; their leases will expire")
            return
        with self._lock:
            for job in unstarted:
                self._held.pop(job.id, None)
        logger.info("handed back unstarted jobs count=%s worker=%s", len(unstarted), self.worker_id)

    def _give_up_running(self) -> None:
        """Record jobs still running at the end as failed attempts, so they rerun soon."""
        if self._aborting.is_set():
            # Exiting at once: the leases expire and the jobs run again elsewhere.
            return
        with self._lock:
            running = [self._held[job_id] for job_id in self._started if job_id in self._held]
        for job in running:
            error = (
                f"Worker {self.worker_id} shut down after waiting {self.shutdown_timeout}s "
                "for the job to finish."
            )
            retry_in = 0.0 if job.attempt < job.max_attempts else None
            try:
                retry_while_locked(
                    partial(
                        record_failure,
                        job_id=job.id,
                        lease_token=job.lease_token,
                        attempt=job.attempt,
                        worker_id=self.worker_id,
                        failure=Failure(error=error, retry_in=retry_in),
                        history_limit=self.history_limit,
                        using=self.using,
                    ),
                    give_up_after=2,
                )
            except DatabaseError:
                logger.warning("could not give back job=%s; its lease will expire", job.id)
            else:
                logger.warning("gave back a job still running at shutdown job=%s", job.id)
