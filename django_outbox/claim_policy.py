"""Which claim a worker runs next: the plain one, or the full one that can take keyed and
dependent jobs.

The full claim checks, for each candidate, its lock key's line and its dependencies; on
PostgreSQL setting those checks up costs about 0.5 ms a claim even when no candidate needs
them (docs/performance.md). The plain claim leaves keyed and dependent jobs out and skips that.
A worker claims plainly unless such jobs may be waiting: when a plain claim comes back short
it asks (one look along a partial index of such jobs) and, if so, claims the rest fully. So a
keyed or dependent job waits at most one extra statement when workers have room, and at most
``full_every`` seconds (the poll interval) while plain jobs keep every thread busy.
"""

from __future__ import annotations

import time


class ClaimPolicy:
    """Decides, claim by claim, whether to claim fully."""

    def __init__(self, full_every: float) -> None:
        self.full_every = full_every
        # Unknown at start: look.
        self._special_waiting = True
        self._last_full = float("-inf")

    def wants_full(self) -> bool:
        return self._special_waiting or time.monotonic() - self._last_full >= self.full_every

    def claimed_fully(self, claimed: int, limit: int) -> None:
        """A full claim took ``claimed`` of ``limit``: a full batch may have left more."""
        self._last_full = time.monotonic()
        self._special_waiting = claimed >= limit
