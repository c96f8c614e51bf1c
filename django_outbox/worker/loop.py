"""The worker: claims jobs and runs them in threads, each with its own database connection.

One thread (the caller's) claims as many jobs as there are free threads (plus ``PREFETCH``, which
``"auto"`` adapts to how long jobs run: ``AdaptivePrefetch``) in one statement, and hands them
over through a local queue. It sleeps until a job finishes, an enqueue is announced (NOTIFY on
PostgreSQL, this process's own enqueues on SQLite) or the poll interval passes. The rest is
delegated: ``HeldJobs`` keeps what the worker holds, ``Maintenance`` extends its leases, takes
back expired ones and prunes, ``Completer`` marks ``atomic=False`` jobs succeeded in batches,
and ``shutdown`` hands back and gives up jobs when it stops. ``run_outbox_worker`` is a thin
command around this class; tests drive it directly.

Database errors never end the worker: every loop backs off and goes on (``ErrorBackoff``).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from django.db import DatabaseError, connections

from .. import signals
from ..claimed import ClaimedJob
from ..conf import get_settings
from ..cron.entries import declared_entries
from ..cron.scheduler import CronScheduler
from ..db import is_lock_wait, queries_for, retry_while_locked
from ..db.base import ClaimKind, worker_lock_wait_seconds
from ..db.outage import ErrorBackoff
from ..jobs import wakeups
from ..jobs.transitions import deleted_jobs
from ..limits.claims import claim_limited
from ..retry import RetryPolicy
from ..validation.text import worker_id_error
from . import health, shutdown
from .activity import ActivityCounter
from .auto_prefetch import AdaptivePrefetch
from .claims import ClaimPolicy
from .completer import Completer
from .held_jobs import HeldJobs
from .job_logs import log_job
from .maintenance import Maintenance
from .pacing import RetryPacing
from .ready_jobs import ReadyJobs
from .registration import Registration
from .relay_thread import RelayThread
from .runner import Outcome, report_cancelled, report_succeeded, run_job

logger = logging.getLogger(__name__)

#: Longest pause between claims while the database fails.
MAX_CLAIM_BACKOFF = 5.0
#: How long a burst worker whose claim found nothing waits before its last look (where
#: claims pass over locked rows).
BURST_LOOK_AGAIN_SECONDS = 0.1


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


ALWAYS_SHOWN = (Outcome.SUCCEEDED, Outcome.RETRYING, Outcome.FAILED, Outcome.LEASE_LOST)


@dataclass
class WorkerStats:
    """What a worker did, by outcome."""

    claimed: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)

    def __str__(self) -> str:
        # The common four always; snoozes, halts and cancellations when there were any.
        shown = [
            outcome for outcome in Outcome if self.outcomes[outcome] or outcome in ALWAYS_SHOWN
        ]
        parts = ", ".join(
            f"{self.outcomes[outcome]} {outcome.value.replace('_', ' ')}" for outcome in shown
        )
        return f"{self.claimed} claimed: {parts}"


class Worker:
    """Run jobs of ``queues`` (all when empty) on ``concurrency`` threads until stopped."""

    def __init__(
        self,
        *,
        queues: Sequence[str] = (),
        exclude_queues: Sequence[str] = (),
        concurrency: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        shutdown_timeout: float | None = None,
        worker_id: str | None = None,
        prefetch: int | Literal["auto"] | None = None,
        cron: bool = True,
        relay: bool = True,
    ) -> None:
        outbox = get_settings()
        self.using = outbox.database
        self.queues = list(queues)
        if self.queues and exclude_queues:
            raise ValueError(
                "A worker runs the queues it is given, or every queue but those it excludes, "
                "not both."
            )
        self.excluded_queues = list(exclude_queues)
        self.concurrency = concurrency or outbox.concurrency
        self.burst = burst
        #: Why a burst worker stopped before its work was done (its database unreachable for
        #: longer than its health allows), or None.
        self.gave_up: str | None = None
        self.max_jobs = max_jobs
        self.shutdown_timeout = (
            outbox.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
        )
        if worker_id is not None and (problem := worker_id_error(worker_id)):
            raise ValueError(problem)
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = outbox.lease_seconds
        self.poll_seconds = outbox.poll_seconds
        self._pacing = RetryPacing(self.poll_seconds)
        self._claim_policy = ClaimPolicy(
            every=self.poll_seconds, plain_claims=queries_for(connections[self.using]).plain_claims
        )
        self.history_limit = outbox.error_history
        self.fallback_policy = RetryPolicy.from_setting(outbox.retry)
        prefetch = outbox.prefetch if prefetch is None else prefetch
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1.")
        if prefetch != "auto" and (not isinstance(prefetch, int) or prefetch < 0):
            raise ValueError(f'prefetch must be "auto" or an integer >= 0, not {prefetch!r}.')
        if max_jobs is not None and max_jobs < 1:
            raise ValueError("max_jobs must be at least 1.")
        # With "auto", the prefetch follows how long recent jobs ran, from none at the start.
        self.auto_prefetch = AdaptivePrefetch(self.concurrency) if prefetch == "auto" else None
        self.held = HeldJobs(self.concurrency)
        self._set_prefetch(0 if prefetch == "auto" else prefetch)

        # Before any thread of the worker connects.
        queries_for(connections[self.using]).configure_worker_connections(connections[self.using])
        self.stats = WorkerStats()
        self._ready = ReadyJobs()
        self._wake = threading.Event()
        # Whether a finished job should wake the loop at once rather than at its next poll.
        self._wake_on_completion = True
        # Whether jobs end faster than this worker claims them, so that a claim waits until
        # the threads hold the last jobs claimed (``_wait_for_places``); how long the last
        # claim took.
        self._threads_wait_for_claims = False
        self._last_claim_seconds = 0.0
        # Whether a burst worker's claim, made while it held nothing, found nothing since its
        # last claim that found jobs.
        self._found_nothing_before = False
        # Whether the last round of claims left jobs held back by a limit, and how long until
        # one may start by its rates and pauses (None: when a running job ends).
        self._limited_held_back = False
        self._limited_wait: float | None = None
        self._stopping = threading.Event()
        self._aborting = threading.Event()
        # Set once the worker has stopped: its helper threads end.
        self._helpers_done = threading.Event()
        self._threads: list[threading.Thread] = []
        # How long the worker's own statements wait for a lock another transaction holds.
        self.lock_wait_seconds = worker_lock_wait_seconds(outbox.heartbeat_seconds)
        self._completer = Completer(
            self.using,
            self._record_completed,
            lock_wait_seconds=self.lock_wait_seconds,
            history_limit=self.history_limit,
            worker_id=self.worker_id,
        )
        # Attempts by queue and minute, for the dashboard's charts (written at heartbeats).
        self.activity = ActivityCounter()
        self.health = health.WorkerHealth(
            allowed_error_seconds=outbox.health["ALLOWED_ERROR_SECONDS"],
            grace_seconds=outbox.health["GRACE_SECONDS"],
            on_change=self._health_changed,
        )
        self._registration = Registration(
            using=self.using,
            worker_id=self.worker_id,
            queues=self.queues,
            concurrency=self.concurrency,
            heartbeat_seconds=outbox.heartbeat_seconds,
            health=self.health,
            counts=self._counts,
            activity=self.activity,
        )
        self._maintenance = Maintenance(
            using=self.using,
            worker_id=self.worker_id,
            held=self.held,
            lease_seconds=self.lease_seconds,
            heartbeat_seconds=outbox.heartbeat_seconds,
            history_limit=self.history_limit,
            retention=outbox.retention,
            done=self._helpers_done,
            fallback=self.fallback_policy,
            cron=self._cron_scheduler(cron),
            health=self.health,
            registration=self._registration,
        )
        # Messages for brokers (publish()) go out from a thread of every worker but burst ones,
        # which exit once their jobs are done.
        self._relay = (
            RelayThread(self.worker_id) if relay and outbox.brokers and not burst else None
        )
        self._claim_errors = ErrorBackoff(
            f"claiming jobs worker={self.worker_id}",
            logger,
            first_delay=self.poll_seconds,
            max_delay=MAX_CLAIM_BACKOFF,
            health=self.health,
            source=health.CLAIM,
        )
        self._outcome_errors = ErrorBackoff(
            f"recording job outcomes worker={self.worker_id}",
            logger,
            first_delay=self.poll_seconds,
            max_delay=MAX_CLAIM_BACKOFF,
        )

    def _cron_scheduler(self, enabled: bool) -> CronScheduler | None:
        """Return the scheduler of the declared cron entries, or None if it has nothing to do.

        A burst worker never schedules: it exits once nothing is runnable, and a tick's job
        would be left to chance.
        """
        if not enabled or self.burst:
            return None
        entries = declared_entries()
        if not entries:
            return None
        return CronScheduler(
            entries, using=self.using, worker_id=self.worker_id, done=self._helpers_done
        )

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
        logger.info(
            "worker started worker=%s queues=%s concurrency=%s prefetch=%s",
            self.worker_id,
            ",".join(self.queues) or "*" + "".join(f" -{queue}" for queue in self.excluded_queues),
            self.concurrency,
            "auto" if self.auto_prefetch is not None else self.prefetch,
        )
        health.track(self.health)
        wakeups.subscribe(self._job_enqueued)
        self._start_threads()
        signals.send(signals.worker_started, Worker, worker=self)
        try:
            # Registered before the first claim: a worker stuck from its start (its first
            # statements waiting on a lock) is seen by outbox_health and the dashboard.
            self._registration.beat()
            self._rescue_before_claiming()
            while not self._stopping.is_set():
                self._wake.clear()
                with self.held.lock:
                    # Nothing held before the claim: every outcome, retries included, was
                    # committed before it, so an empty claim means nothing is runnable now.
                    idle_before_claim = self.held.is_empty()
                free = self._free_slots()
                try:
                    claim_started = time.monotonic()
                    claimed = self._claim(free) if free > 0 else []
                    self._last_claim_seconds = time.monotonic() - claim_started
                except DatabaseError as exc:
                    # The claim is one transaction, so nothing is half-done: try again after a
                    # growing pause, on a new connection (or at a wake-up). Had it committed and
                    # lost its answer with the connection, its jobs' leases run out and this
                    # worker's maintenance takes them back (it holds none of them).
                    connections[self.using].close()
                    if self._stopping.is_set() and is_lock_wait(exc):
                        # Gave up waiting for a lock to stop: no database error to report.
                        break
                    self._wake.wait(self._claim_errors.failed(exc))
                    continue
                self._claim_errors.succeeded()
                # A claim that found fewer jobs than it asked for left nothing runnable, and a
                # finished job adds none: claim again at the next poll, not at every completion.
                # Burst and max-jobs runs wait for completions to exit promptly.
                # Jobs held back by a limit may start once a running job ends: claim again at
                # completions, and when a rate's next token comes or a pause ends.
                limited = self._limited_held_back
                self._wake_on_completion = (
                    len(claimed) == free or self.burst or self._max_jobs_reached() or limited
                )
                if self.burst and idle_before_claim and not claimed:
                    resume = self._pacing.seconds_to_resume()
                    token_soon = self._limited_wait is not None and (
                        self._limited_wait <= self.poll_seconds
                    )
                    if limited and token_soon:
                        # A rate's next token is near: a burst drains rate-limited jobs too
                        # (a long pause, or a cap other workers fill, ends it).
                        resume = min(resume or self.poll_seconds, self._limited_retry_in())
                    if resume is None:
                        if self._found_nothing_before or not self._claims_skip_locked_rows():
                            break
                        # The claim passed over rows another transaction held locked for a
                        # moment (a heartbeat's, a retry's own recording): once, look again
                        # before leaving a job due. Seen as a retry left due by its own burst.
                        self._found_nothing_before = True
                        resume = min(self.poll_seconds, BURST_LOOK_AGAIN_SECONDS)
                    # Retries held back for now are runnable: a burst waits for them.
                    self._wake.wait(resume)
                    continue
                if claimed:
                    self._found_nothing_before = False
                if self._max_jobs_reached() and not self.held:
                    break
                self._wait_for_places(self._limited_retry_in() if limited else self.poll_seconds)
        finally:
            wakeups.unsubscribe(self._job_enqueued)
            try:
                self._shut_down()
            finally:
                self._registration.leave()
                health.untrack(self.health)
        logger.info("worker stopped worker=%s %s", self.worker_id, self.stats)
        signals.send(signals.worker_stopped, Worker, worker=self, stats=self.stats)
        return self.stats

    def _counts(self) -> tuple[int, int]:
        """The attempts this worker finished, and those that failed (for the registry)."""
        with self.held.lock:
            outcomes = self.stats.outcomes
            done = sum(outcomes.values()) - outcomes[Outcome.LEASE_LOST]
            return done, outcomes[Outcome.RETRYING] + outcomes[Outcome.FAILED]

    def _health_changed(self, healthy: bool) -> None:
        """Log and signal that this worker became unhealthy, or healthy again."""
        error, _ago = self.health.last_error()
        seconds = self.health.in_error_for()
        if not healthy:
            logger.error(
                "worker unhealthy worker=%s in_error_for=%.0fs last_error=%s",
                self.worker_id,
                seconds or 0.0,
                error,
            )
            signals.send(
                signals.worker_unhealthy, Worker, worker=self, seconds=seconds, error=error
            )
            if self.burst:
                # A burst is a task that ends (a cron job, a CI step): retrying for as long as
                # the database stays away would leave it hanging, and the next run beside it.
                # A long-running worker rides the outage out; its probe decides.
                self.gave_up = f"in error for {seconds or 0.0:.0f}s: {error}"
                logger.error("burst worker gives up worker=%s %s", self.worker_id, self.gave_up)
                self.request_stop()
        else:
            logger.warning("worker healthy again worker=%s", self.worker_id)
            signals.send(signals.worker_recovered, Worker, worker=self)

    def _rescue_before_claiming(self) -> None:
        """Take back expired leases before the first claim (the heartbeat does it later).

        A worker restarted after a crash runs its predecessor's jobs without waiting a
        heartbeat, and a burst worker sees them before it decides there is nothing to do.
        """
        connection = connections[self.using]
        try:
            with queries_for(connection).claim_lock_wait(connection):
                self._maintenance.rescue(stopping=self._stopping.is_set)
        except DatabaseError:
            # The claim that follows meets the same error and backs off; the heartbeat retries.
            connections[self.using].close()

    def _set_prefetch(self, prefetch: int) -> None:
        """Claim up to ``prefetch`` jobs ahead of free threads from now on (``held.lock`` held,
        or before the worker runs)."""
        self.prefetch = prefetch
        # Jobs held at most: one per thread, plus those claimed ahead.
        self.capacity = self.concurrency + prefetch
        self.held.capacity = self.capacity
        # A busy worker claims again once this many places are free, so that claims stay
        # batched; without prefetch, as soon as one thread is free.
        self.claim_threshold = max(1, prefetch // 2)

    def _attempt_ended(self, job: ClaimedJob) -> None:
        """Adapt an ``"auto"`` prefetch to how long ``job`` kept its thread: from its handler's
        start to its outcome recorded (an atomic job's commit included) or handed to the
        completer. Called with ``held.lock`` held, before the freed slot wakes the loop, so
        that the claim it wakes for sees the new capacity."""
        if self.auto_prefetch is None or job.handler_started is None:
            # A fixed prefetch; or the job never reached its handler (cancelled, undecodable).
            return
        prefetch = self.auto_prefetch.record(time.monotonic() - job.handler_started)
        if prefetch != self.prefetch:
            self._set_prefetch(prefetch)

    def _wait_for_places(self, timeout: float) -> None:
        """Wait ``timeout`` seconds at most for a wake-up that leaves a batch's places free.

        Jobs that end while a claim runs wake the loop for the places they free, which that
        claim's own jobs then take. Claimed at once, the places left made a claim of a few
        jobs at a batch's round trip (on PostgreSQL, limited claims of 1 job alternated with
        claims of 107, each 8 to 28 ms): a busy worker waits on until a batch's worth is free.
        A poll's timeout claims whatever is free.

        Where those ends freed a batch's worth already, the threads run jobs faster than the
        worker claims them. Claimed at once, the jobs just claimed free their places during
        the next claim, and claims of half a batch alternate for good, each at a whole
        batch's round trip (claims of 51 and 57 jobs where 108 were free; of 4 and 6 where
        10 were): the database does twice the claims for the same jobs. So, from then on,
        wait until the threads hold no more jobs than they run, and claim every place at
        once; but no longer than the last claim took (then the threads were the slower).
        """
        with self.held.lock:
            if self._wake_on_completion and self.held.places_free() >= self.claim_threshold:
                self._threads_wait_for_claims = True
        now = time.monotonic()
        deadline = now + timeout
        patience_ends = now + self._last_claim_seconds
        while True:
            patient = self._threads_wait_for_claims and now < patience_ends
            woken = self._wake.wait(
                max(0.0, min(deadline, patience_ends if patient else deadline) - now)
            )
            now = time.monotonic()
            if not woken:
                if now >= deadline:
                    return
                # The threads took longer than a claim to free a batch's places.
                self._threads_wait_for_claims = False
            # Patient: every place but the threads' own (the prefetch) must be free.
            patient = self._threads_wait_for_claims and now < patience_ends
            places = max(self.claim_threshold, self.prefetch) if patient else self.claim_threshold
            with self.held.lock:
                if not self._wake_on_completion or self.held.is_empty():
                    return
                if self.held.places_free() >= places:
                    return
                self._wake.clear()
            # Cleared after a stop's wake-up: the stop is seen here (it is set first).
            if self._stopping.is_set():
                return

    def _claims_skip_locked_rows(self) -> bool:
        """Whether claims pass over rows other transactions lock (PostgreSQL, MariaDB), rather
        than wait for them (SQLite's one writer)."""
        return bool(connections[self.using].features.has_select_for_update_skip_locked)

    def _max_jobs_reached(self) -> bool:
        return self.max_jobs is not None and self.stats.claimed >= self.max_jobs

    def _free_slots(self) -> int:
        with self.held.lock:
            free = self.held.places_free()
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.stats.claimed)
        return free

    def _claim(self, limit: int) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs and queue them for the threads."""
        connection = connections[self.using]
        queries = queries_for(connection)
        queries.prepare_worker_connection(connection)
        queries.bound_lock_waits(connection, self.lock_wait_seconds, self.worker_id)
        paused = self._pacing.paused()

        jobs: list[ClaimedJob] = []
        self._limited_held_back = False
        self._limited_wait = None

        def claim(kind: ClaimKind, count: int) -> int:
            if kind is ClaimKind.LIMITED:
                return claim_limited_jobs(count)
            claimed = retry_while_locked(
                lambda: queries.claim(
                    connection,
                    self.worker_id,
                    self.queues,
                    count,
                    self.lease_seconds,
                    paused,
                    kind,
                    excluded_queues=self.excluded_queues,
                ),
                stopping=self._stopping.is_set,
            )
            jobs.extend(claimed)
            return len(claimed)

        def claim_limited_jobs(count: int) -> int:
            limited = retry_while_locked(
                lambda: claim_limited(
                    self.using,
                    self.worker_id,
                    self.queues,
                    count,
                    self.lease_seconds,
                    paused,
                    excluded_queues=self.excluded_queues,
                ),
                stopping=self._stopping.is_set,
            )
            jobs.extend(limited.jobs)
            if limited.held_back:
                self._limited_held_back = True
                self._limited_wait = limited.retry_in
                self._claim_policy.limited_held_back()
            return len(limited.jobs)

        try:
            with queries.claim_lock_wait(connection):
                self._claim_policy.claim_round(
                    limit,
                    claim,
                    look=lambda: queries.waiting_kinds(
                        connection, self.queues, self.excluded_queues
                    ),
                )
        finally:
            # A later claim of the round may fail: the jobs the earlier ones took are this
            # worker's all the same (their leases say so), to run rather than leave to expire.
            self.held.add(jobs)
            self.stats.claimed += len(jobs)
            self._ready.put_claimed(jobs)
        return jobs

    def _limited_retry_in(self) -> float:
        """How long to wait before claiming again while limits hold jobs back: until a rate's
        next token or a pause's end, at most a poll interval, and not less than a millisecond."""
        wait = self.poll_seconds if self._limited_wait is None else self._limited_wait
        return max(0.001, min(self.poll_seconds, wait))

    def _job_enqueued(self, queue: str) -> None:
        """Wake the loop for an enqueue to ``queue`` ("": unknown) that it may claim."""
        if queue and ((self.queues and queue not in self.queues) or queue in self.excluded_queues):
            return
        with self.held.lock:
            # A busy worker whose completions will claim anyway waits for a batch's worth of
            # places: one wake per enqueue would make a claim per enqueue.
            if self._wake_on_completion and self.held.places_free() < self.claim_threshold:
                return
        self._wake.set()

    def _slot_freed(self) -> None:
        """Wake the loop when enough places are free for a batched claim (lock held)."""
        enough_free = self.held.places_free() >= self.claim_threshold
        # An empty worker in burst or max-jobs mode wakes to exit.
        if self._wake_on_completion and (enough_free or self.held.is_empty()):
            self._wake.set()

    # Threads.

    def _start_threads(self) -> None:
        for number in range(self.concurrency):
            thread = threading.Thread(
                target=self._execute_jobs, name=f"outbox-worker-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._completer.start()
        self._maintenance.start()
        if self._relay is not None:
            self._relay.start()
        if queries_for(connections[self.using]).listens:
            threading.Thread(target=self._listen, name="outbox-listener", daemon=True).start()

    def _listen(self) -> None:
        connection = connections[self.using]
        try:
            queries_for(connection).listen(
                connection, self._job_enqueued, self._helpers_done, retry_seconds=self.poll_seconds
            )
        except Exception:
            # Never fatal: the loop polls anyway.
            logger.exception("listener stopped worker=%s; polling only", self.worker_id)

    def _execute_jobs(self) -> None:
        connection = connections[self.using]
        try:
            while True:
                job = self._ready.get()
                if job is None:
                    return
                with self.held.lock:
                    if self._stopping.is_set():
                        # Shutting down: the job goes back to the queue unstarted.
                        self._ready.put(job)
                        return
                    self.held.mark_started(job)
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
        except DatabaseError as exc:
            # Recording the outcome failed (the database went away): the lease will expire and
            # the job will run again. Keep this thread alive for the next job.
            connection.close()
            self._outcome_errors.failed(exc)
            outcome = Outcome.LEASE_LOST
            abandoned = True
        except Exception:
            # Not the handler's error (run_job records those): a signal receiver's, say.
            log_job(logger, logging.ERROR, job, "outcome not recorded", exc_info=True)
            connection.close()
            outcome = Outcome.LEASE_LOST
            abandoned = True
        else:
            abandoned = False
            if outcome is not None:
                self._outcome_errors.succeeded()
        if outcome is None:
            # Handed to the completer (see _complete_later), which records the outcome.
            return
        if job.attempts > 1 and outcome in (Outcome.RETRYING, Outcome.FAILED):
            self._pacing.retry_failed_again(job.queue)
        with self.held.lock:
            if abandoned:
                # This worker beats on: others leave the job to it (it might still run it), so
                # it must take the job back itself once the lease expires.
                self.held.abandon(job)
            else:
                self.held.drop([job.id])
            self.stats.outcomes[outcome] += 1
            self._attempt_ended(job)
            self._slot_freed()
        self.activity.add(job.queue, outcome)

    def _complete_later(self, job: ClaimedJob) -> None:
        """Free the thread now; the completer marks the job succeeded with others."""
        with self.held.lock:
            self.held.mark_completing(job)
            self._attempt_ended(job)
            self._slot_freed()
        self._completer.add(job)

    def _record_completed(
        self, jobs: list[ClaimedJob], marked: set[int], cancelled: set[int]
    ) -> None:
        """Called by the completer once a batch is written."""
        with self.held.lock:
            self.held.drop([job.id for job in jobs])
            for job in jobs:
                if job.id in marked:
                    outcome = Outcome.SUCCEEDED
                elif job.id in cancelled:
                    outcome = Outcome.CANCELLED
                else:
                    outcome = Outcome.LEASE_LOST
                self.stats.outcomes[outcome] += 1
                self.activity.add(job.queue, outcome)
            self._slot_freed()
        lost = [job.id for job in jobs if job.id not in marked and job.id not in cancelled]
        gone = self._deleted_of(lost) if lost else set()
        for job in jobs:
            if job.id in marked:
                report_succeeded(job)
            elif job.id in cancelled:
                report_cancelled(job)
            else:
                log_job(
                    logger,
                    logging.WARNING,
                    job,
                    "lease lost",
                    "the job was deleted while it ran: nothing recorded"
                    if job.id in gone
                    else "it ran, but another worker owns it now",
                )

    def _deleted_of(self, job_ids: list[int]) -> set[int]:
        """Which of ``job_ids`` were deleted while they ran (for the log; on the completer's
        thread, after its write): none known if the database can't say."""
        try:
            return deleted_jobs(job_ids, self.using)
        except DatabaseError:
            connections[self.using].close()
            return set()

    # Shutdown.

    def _shut_down(self) -> None:
        with self.held.lock:
            self._stopping.set()
        # Unstarted jobs go back at once, for other workers to run while this one waits.
        unstarted = shutdown.take_unstarted(self._ready)
        if not shutdown.hand_back(unstarted, self.held, self.using, self.worker_id):
            unstarted_later = unstarted
        else:
            unstarted_later = []
        for _ in self._threads:
            self._ready.put(None)
        deadline = time.monotonic() + self.shutdown_timeout
        for thread in self._threads:
            while thread.is_alive() and not self._aborting.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                thread.join(min(remaining, 0.1))
        # Threads that saw the stop put their job back in the queue.
        shutdown.hand_back(
            unstarted_later + shutdown.take_unstarted(self._ready),
            self.held,
            self.using,
            self.worker_id,
        )
        if not self._aborting.is_set():
            shutdown.give_up_running(
                self.held.running(),
                using=self.using,
                worker_id=self.worker_id,
                waited=self.shutdown_timeout,
                history_limit=self.history_limit,
            )
        if self._relay is not None:
            # Its batch in flight finishes (or is handed back); its leases expire otherwise.
            self._relay.stop(timeout=1.0 if self._aborting.is_set() else 10.0)
        # Jobs whose handler returned are recorded before the worker goes.
        self._completer.stop(timeout=1.0 if self._aborting.is_set() else 30.0)
        self._helpers_done.set()
        connections[self.using].close()
