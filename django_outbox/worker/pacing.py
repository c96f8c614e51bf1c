"""Retry pacing: when a retried job fails again, the worker holds back the other due retries of
its queue until its next poll, as a retry poller that stops at the first failure would.

The assumption: the retries of one queue share a downstream (an API, a mail server), and the
one that just failed again says it is still down, so running the others now would only fail
them too and use up their attempts. New jobs keep flowing; each queue paces on its own; a
queue opts out with ``OUTBOX["QUEUES"][name]["PACE_RETRIES"] = False``. The pause is this
worker's: other workers learn the same from their own retries.
"""

from __future__ import annotations

import logging
import threading
import time

from ..conf import get_settings

logger = logging.getLogger(__name__)


class RetryPacing:
    """The queues whose due retries this worker holds back, and until when."""

    def __init__(self, pause_seconds: float) -> None:
        self.pause_seconds = pause_seconds
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}

    def retry_failed_again(self, queue: str) -> None:
        """A retry of ``queue`` failed again: hold its other retries back until the next poll."""
        if not get_settings().queue_options(queue).pace_retries:
            return
        with self._lock:
            paused = queue in self._until
            self._until[queue] = time.monotonic() + self.pause_seconds
        if not paused:
            logger.info(
                "retries paused queue=%s seconds=%s: a retried job failed again",
                queue,
                self.pause_seconds,
            )

    def paused(self) -> list[str]:
        """The queues whose retries wait now."""
        if not self._until:
            return []
        now = time.monotonic()
        with self._lock:
            for queue in [queue for queue, until in self._until.items() if until <= now]:
                del self._until[queue]
            return sorted(self._until)

    def seconds_to_resume(self) -> float | None:
        """Seconds until the first paused queue's retries may run again; None if none wait."""
        with self._lock:
            if not self._until:
                return None
            return max(0.0, min(self._until.values()) - time.monotonic())
