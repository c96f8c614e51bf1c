"""Whether this process's workers are healthy, and the rule behind it.

A worker is in error while its claims or its heartbeats fail with database errors (the loops
that ``ErrorBackoff`` keeps going). It is unhealthy once it has been in error for longer than
``OUTBOX["HEALTH"]["ALLOWED_ERROR_SECONDS"]``, unless it started less than ``GRACE_SECONDS``
ago: a database that fails for a moment, or a worker started while it restarts, is no reason
for a liveness probe to kill the worker (the grace period lets a rolling upgrade go
through). ``worker_unhealthy`` and ``worker_recovered`` are sent when a worker crosses the line.

``healthy()`` answers for the workers of this process; ``manage.py outbox_health`` answers for
every worker, from the registry (``django_outbox.workers``) and the database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..db.outage import first_line

logger = logging.getLogger(__name__)

#: The loops whose errors put a worker in error: they touch the database every poll or
#: heartbeat, so their recovery is seen as soon as it happens.
CLAIM, HEARTBEAT = "claim", "heartbeat"


class WorkerHealth:
    """One worker's run of database errors, and whether it is healthy now.

    Thread-safe: the worker's loop and its heartbeat thread report to it. ``on_change`` is
    called (outside the lock) with the new answer of ``healthy()`` when it turns False, and
    when it turns True again.
    """

    def __init__(
        self,
        *,
        allowed_error_seconds: float,
        grace_seconds: float,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed_error_seconds = allowed_error_seconds
        self.grace_seconds = grace_seconds
        self.on_change = on_change
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        # The failing loops, and when the worker's run of errors began: the first failure
        # while none was failing, until none is.
        self._failing: set[str] = set()
        self._since = 0.0
        self._known = False
        self._last_error = ""
        self._last_error_at: float | None = None
        # The answer last passed to on_change: True until a worker has been unhealthy.
        self._reported = True

    def failed(self, source: str, error: BaseException) -> None:
        """Record that ``source`` (CLAIM or HEARTBEAT) failed with ``error``."""
        now = self.clock()
        with self._lock:
            self._known = True
            if not self._failing:
                self._since = now
            self._failing.add(source)
            self._last_error = first_line(error)
            self._last_error_at = now
        self._check()

    def noted(self, message: str) -> None:
        """Record ``message`` as the latest error without putting the worker in error: a
        problem outside it (a job's row locked for long) that restarting it would not solve."""
        with self._lock:
            self._last_error = message
            self._last_error_at = self.clock()

    def succeeded(self, source: str) -> None:
        """Record that ``source`` worked (ending its run of errors, if any)."""
        with self._lock:
            self._known = True
            self._failing.discard(source)
        self._check()

    def in_error_for(self) -> float | None:
        """Seconds since the worker's current run of errors began; None when not in error."""
        with self._lock:
            if not self._failing:
                return None
            return self.clock() - self._since

    def last_error(self) -> tuple[str, float | None]:
        """The latest error's first line and how many seconds ago it was (None: never)."""
        with self._lock:
            ago = None if self._last_error_at is None else self.clock() - self._last_error_at
            return self._last_error, ago

    def healthy(self) -> bool | None:
        """True, False, or None before the worker's first claim or heartbeat has told."""
        with self._lock:
            if not self._known:
                return None
            if not self._failing:
                return True
            now = self.clock()
            in_error_for = now - self._since
            return is_healthy(
                in_error_for=in_error_for,
                running_for=now - self.started,
                allowed_error_seconds=self.allowed_error_seconds,
                grace_seconds=self.grace_seconds,
            )

    def _check(self) -> None:
        """Tell ``on_change`` when the answer crossed from healthy to not, or back."""
        answer = self.healthy()
        if answer is None:
            return
        with self._lock:
            changed = answer != self._reported
            self._reported = answer
        if changed and self.on_change is not None:
            self.on_change(answer)


def is_healthy(
    *,
    in_error_for: float | None,
    running_for: float,
    allowed_error_seconds: float,
    grace_seconds: float,
) -> bool:
    """The rule: unhealthy when in error longer than allowed, once past the grace period."""
    if in_error_for is None or running_for < grace_seconds:
        return True
    return in_error_for <= allowed_error_seconds


_workers: list[WorkerHealth] = []
_workers_lock = threading.Lock()


def track(health: WorkerHealth) -> None:
    """Count ``health``'s worker in ``healthy()`` (while it runs)."""
    with _workers_lock:
        _workers.append(health)


def untrack(health: WorkerHealth) -> None:
    with _workers_lock:
        if health in _workers:
            _workers.remove(health)


def healthy() -> bool | None:
    """Whether the workers running in this process are healthy.

    True when every one is; False when any has been in error (its claims or heartbeats failing
    with database errors) longer than ``OUTBOX["HEALTH"]["ALLOWED_ERROR_SECONDS"]`` and started
    more than ``GRACE_SECONDS`` ago; None when no worker runs in this process, or one has not
    yet made its first claim or heartbeat.
    """
    with _workers_lock:
        workers = list(_workers)
    answers = [health.healthy() for health in workers]
    if not answers:
        return None
    if False in answers:
        return False
    if None in answers:
        return None
    return True
