"""The jobs one worker holds a lease on, shared by its loop, its threads and its maintenance."""

from __future__ import annotations

import threading
import uuid
from collections import deque

from ..claimed import ClaimedJob


class HeldJobs:
    """Jobs claimed and not yet recorded: waiting, running, or waiting for the completer.

    Thread-safe. ``lock`` is exposed so that a caller can make a decision and a change under
    one lock (the loop's wake-ups, a thread starting a job unless the worker stops).
    """

    def __init__(self, capacity: int) -> None:
        # Jobs held at most while not completing: one per thread, plus those claimed ahead. The
        # worker changes it (under ``lock``) as an "auto" prefetch adapts.
        self.capacity = capacity
        self.lock = threading.Lock()
        self._jobs: dict[int, ClaimedJob] = {}
        self._started: set[int] = set()
        self._completing: set[int] = set()
        # Lease tokens of jobs let go with their outcome unrecorded (the database failed):
        # this worker takes them back once their lease expires. A token matches one attempt
        # only, so the oldest can be forgotten.
        self._abandoned: deque[uuid.UUID] = deque(maxlen=1000)

    def __len__(self) -> int:
        with self.lock:
            return len(self._jobs)

    def is_empty(self) -> bool:
        """Whether no job is held (call with ``lock`` held)."""
        return not self._jobs

    def add(self, jobs: list[ClaimedJob]) -> None:
        with self.lock:
            for job in jobs:
                self._jobs[job.id] = job

    def mark_started(self, job: ClaimedJob) -> None:
        """Record that ``job``'s handler runs (call with ``lock`` held)."""
        self._started.add(job.id)

    def mark_completing(self, job: ClaimedJob) -> None:
        """Its handler returned; the completer records it (call with ``lock`` held)."""
        self._started.discard(job.id)
        self._completing.add(job.id)

    def drop(self, job_ids: list[int]) -> None:
        """Forget jobs whose outcome is recorded or that were handed back (``lock`` held)."""
        for job_id in job_ids:
            self._jobs.pop(job_id, None)
            self._started.discard(job_id)
            self._completing.discard(job_id)

    def abandon(self, job: ClaimedJob) -> None:
        """Let go of ``job`` with its outcome unrecorded (``lock`` held): its lease is no longer
        extended, and this worker takes it back once the lease expires."""
        self.drop([job.id])
        self._abandoned.append(job.lease_token)

    def abandoned_tokens(self) -> list[uuid.UUID]:
        """The lease tokens of the jobs let go of by ``abandon``."""
        with self.lock:
            return list(self._abandoned)

    def places_free(self) -> int:
        """How many jobs a claim may take now (call with ``lock`` held).

        Jobs waiting for the completer don't take a thread, but they are held: should the
        completer fall behind (a slow database), stop claiming rather than pile them up.
        """
        return min(self.capacity - self.waiting_or_running(), 2 * self.capacity - len(self._jobs))

    def waiting_or_running(self) -> int:
        """How many held jobs wait for a thread or run (call with ``lock`` held)."""
        return len(self._jobs) - len(self._completing)

    def all(self) -> list[ClaimedJob]:
        with self.lock:
            return list(self._jobs.values())

    def running(self) -> list[ClaimedJob]:
        """Jobs whose handler has started and not returned."""
        with self.lock:
            return [self._jobs[job_id] for job_id in self._started if job_id in self._jobs]

    def tokens(self) -> list[uuid.UUID]:
        """The lease tokens of every held job: these leases are this worker's own."""
        with self.lock:
            return [job.lease_token for job in self._jobs.values()]
