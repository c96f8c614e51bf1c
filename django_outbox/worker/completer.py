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
from ..db import retry_while_locked
from ..db.outage import ErrorBackoff
from ..jobs.transitions import mark_many_succeeded

logger = logging.getLogger(__name__)

#: Called with each recorded batch and the ids in it whose lease still held.
OnRecorded = Callable[[list[ClaimedJob], set[int]], None]


class Completer:
    """Mark handed-over jobs succeeded in batches, on a thread and connection of its own."""

    def __init__(
        self,
        using: str,
        on_recorded: OnRecorded,
        *,
        interval: float = 0.002,
        retry_seconds: float = 1.0,
    ) -> None:
        self.using = using
        self.on_recorded = on_recorded
        # How long a batch gathers before it is written: long enough that a busy worker writes
        # tens of jobs per statement, short enough that nobody waits for it.
        self.interval = interval
        self.retry_seconds = retry_seconds
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
            marked = retry_while_locked(
                lambda: mark_many_succeeded(batch, self.using), give_up_after=30
            )
        except DatabaseError as exc:
            # Kept, and tried again: until marked, the jobs' leases are held and extended.
            with self._lock:
                self._pending[:0] = batch
                self._has_work.set()
            return exc
        self._errors.succeeded()
        self.on_recorded(batch, marked)
        return None
