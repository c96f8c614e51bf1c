"""Recording finished ``atomic=False`` jobs as succeeded, many per statement.

A handler's thread hands its finished job over and goes on to the next one. Every few
milliseconds the completer marks all jobs handed over since in one statement, each fenced by its
own attempt's lease token, so a worker that lost a lease still changes nothing. Until a job is
marked its lease is held (and extended) like a running job's, so a crash in between means the
job runs again: at least once, never lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, connections

from ..claimed import ClaimedJob
from ..db import queries_for, retry_while_locked
from ..db.outage import ErrorBackoff
from ..jobs.transitions import mark_many_succeeded, record_cancelled, still_held

logger = logging.getLogger(__name__)

#: What the job's history says of an attempt whose cancel request beat its success mark.
CANCELLED_AFTER_RETURN = "The handler had returned (atomic=False): its effects stand."

#: The first wait before rows another transaction locked are tried again (it doubles).
FIRST_LOCKED_ROWS_RETRY_SECONDS = 0.005

#: Called with each recorded batch, the ids in it marked succeeded, and those recorded as
#: cancelled (cancel() was requested before the mark); the others' leases were lost.
OnRecorded = Callable[[list[ClaimedJob], set[int], set[int]], None]


class Completer:
    """Mark handed-over jobs succeeded in batches, on a thread and connection of its own."""

    def __init__(
        self,
        using: str,
        on_recorded: OnRecorded,
        *,
        interval: float = 0.002,
        retry_seconds: float = 1.0,
        lock_wait_seconds: float | None = None,
        history_limit: int | None = None,
        worker_id: str = "",
    ) -> None:
        self.using = using
        self.on_recorded = on_recorded
        # How long a batch gathers before it is written: long enough that a busy worker writes
        # tens of jobs per statement, short enough that nobody waits for it.
        self.interval = interval
        self.retry_seconds = retry_seconds
        # How long its statements wait for a lock (None: as the connection says).
        self.lock_wait_seconds = lock_wait_seconds
        self.history_limit = history_limit
        self.worker_id = worker_id
        # Set when the last batch left jobs whose rows another transaction locked: they are
        # tried again soon, then less and less often while they stay locked
        # (``_locked_rows_retry_in``).
        self._rows_locked = False
        self._locked_rows_wait = 0.0
        self._pending: list[ClaimedJob] = []
        self._lock = threading.Lock()
        self._has_work = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = ErrorBackoff(
            "recording finished jobs", logger, first_delay=retry_seconds, max_delay=5.0
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="outbox-completer", daemon=True)
        self._thread.start()

    def add(self, job: ClaimedJob) -> None:
        """Hand over ``job``, whose handler returned; it is marked succeeded soon."""
        with self._lock:
            self._pending.append(job)
        self._has_work.set()

    def stop(self, timeout: float) -> None:
        """Write what is pending and stop; give up after ``timeout`` seconds (leases expire)."""
        # Under the lock: _flush() must not clear the wake-up this stop gives.
        with self._lock:
            self._stopping.set()
            self._has_work.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("completer did not finish; the jobs it held will run again")

    def _run(self) -> None:
        connection = connections[self.using]
        try:
            while True:
                self._has_work.wait()
                if self._stopping.is_set():
                    self._flush_before_exit()
                    return
                # Let more handlers finish, so that one statement records them all.
                self._stopping.wait(self.interval)
                error = self._flush()
                if error is not None:
                    connection.close()
                    self._stopping.wait(self._errors.failed(error))
                elif self._rows_locked:
                    self._stopping.wait(self._locked_rows_retry_in())
        finally:
            connection.close()

    def _flush_before_exit(self) -> None:
        for _ in range(3):
            if self._flush() is None:
                return
            connections[self.using].close()
            time.sleep(self.retry_seconds)

    def _flush(self) -> DatabaseError | None:
        """Write the pending jobs; return the database's error (keeping them pending) if any."""
        with self._lock:
            batch, self._pending = self._pending, []
            if not self._stopping.is_set():
                self._has_work.clear()
        if not batch:
            return None
        try:
            if self.lock_wait_seconds is not None:
                connection = connections[self.using]
                queries_for(connection).bound_lock_waits(
                    connection, self.lock_wait_seconds, self.worker_id
                )
            marked = retry_while_locked(
                lambda: mark_many_succeeded(batch, self.using), give_up_after=30
            )
            cancelled, locked = self._not_marked(batch, marked)
        except DatabaseError as exc:
            # Kept, and tried again: until marked, the jobs' leases are held and extended.
            with self._lock:
                self._pending[:0] = batch
                self._has_work.set()
            return exc
        self._errors.succeeded()
        self._rows_locked = bool(locked)
        if locked:
            # Still held: their leases are extended once the rows are free, and so tried here.
            with self._lock:
                self._pending[:0] = locked
                self._has_work.set()
            batch = [job for job in batch if job not in locked]
        else:
            self._locked_rows_wait = 0.0
        self.on_recorded(batch, marked, cancelled)
        return None

    def _locked_rows_retry_in(self) -> float:
        """How long to wait before the rows another transaction locked are tried again.

        Mostly it is another worker's claim: PostgreSQL locks the newest version of each row
        its scan meets before it finds the row no longer runnable (claimed meanwhile, by this
        worker), and keeps the lock until the claim commits, a few milliseconds later. Their
        jobs hold this worker's places until they are marked, so a wait of ``retry_seconds``
        there left a worker idle with jobs waiting. An operator's open transaction may hold a
        row for minutes: the wait doubles, up to ``retry_seconds``, while rows stay locked.
        """
        self._locked_rows_wait = min(
            self.retry_seconds, max(FIRST_LOCKED_ROWS_RETRY_SECONDS, 2 * self._locked_rows_wait)
        )
        return self._locked_rows_wait

    def _not_marked(
        self, batch: list[ClaimedJob], marked: set[int]
    ) -> tuple[set[int], list[ClaimedJob]]:
        """Record the jobs of ``batch`` not marked that cancel() asked to stop as cancelled;
        return their ids, and the jobs whose rows another transaction locked (to try again).
        The rest lost their leases."""
        unmarked = [job for job in batch if job.id not in marked]
        if not unmarked:
            return set(), []
        held = still_held(unmarked, self.using)
        cancelled: set[int] = set()
        locked = []
        for job in unmarked:
            if job.id not in held:
                continue
            if held[job.id]:
                job.mark_cancel_requested()
                note = CANCELLED_AFTER_RETURN
                if record_cancelled(job, self.using, note, self.history_limit):
                    cancelled.add(job.id)
            else:
                locked.append(job)
        return cancelled, locked
