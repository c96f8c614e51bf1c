"""Riding out database errors: log a run of them once, and wait longer between tries.

A database restart, a failover or a killed backend makes every statement of every worker thread
fail for a while. Each loop of the worker (claims, heartbeats, completions, pruning, listening)
keeps one ``ErrorBackoff``: the first error of a run is logged with its traceback, later ones of
the same kind only as a count every ``remind_every`` seconds, and the loop waits a growing
pause before its next try, so an outage costs neither a tight loop nor a flood of tracebacks.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from . import is_lock_wait


class ErrorListener(Protocol):
    """Told of each error and success of the loops it listens to (a worker's health)."""

    def failed(self, source: str, error: BaseException) -> None: ...

    def succeeded(self, source: str) -> None: ...


class ErrorBackoff:
    """The state of one loop's run of errors: how long to wait next, and what to log."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        *,
        first_delay: float,
        max_delay: float = 10.0,
        remind_every: float = 60.0,
        health: ErrorListener | None = None,
        source: str = "",
    ) -> None:
        self.what = what
        self.logger = logger
        self.first_delay = first_delay
        self.max_delay = max(max_delay, first_delay)
        self.remind_every = remind_every
        self.errors = 0
        self._delay = first_delay
        self._since = 0.0
        self._kind = ""
        self._reminded = 0.0
        # The worker's health, told of each error and success of this loop (as ``source``).
        self.health = health
        self.source = source

    @property
    def failing(self) -> bool:
        return self.errors > 0

    def failed(self, exc: BaseException) -> float:
        """Count ``exc``; log it if it starts a run (or a new kind); return seconds to wait."""
        now = time.monotonic()
        kind = type(exc).__name__
        if not self.errors or kind != self._kind:
            if not self.errors:
                self._since = now
            self._kind = kind
            self._reminded = now
            # A lock held by another connection (SQLite's one writer, a handler's long
            # transaction, another worker's claim) is contention, not breakage: its stack
            # says nothing more.
            locked = is_lock_wait(exc)
            self.logger.log(
                logging.WARNING if locked else logging.ERROR,
                "%s failed: %s; retrying, and logging further %s errors only every %ss",
                self.what,
                first_line(exc),
                kind,
                int(self.remind_every),
                exc_info=None if locked else exc,
            )
        elif now - self._reminded >= self.remind_every:
            self._reminded = now
            self.logger.error(
                "%s still failing errors=%s for=%.0fs last=%s",
                self.what,
                self.errors + 1,
                now - self._since,
                first_line(exc),
            )
        self.errors += 1
        if self.health is not None:
            self.health.failed(self.source, exc)
        delay = self._delay
        self._delay = min(self._delay * 2, self.max_delay)
        return delay

    def succeeded(self) -> None:
        """End a run of errors, if there was one, saying how long it lasted."""
        if self.health is not None:
            self.health.succeeded(self.source)
        if not self.errors:
            return
        self.logger.warning(
            "%s works again errors=%s after=%.1fs",
            self.what,
            self.errors,
            time.monotonic() - self._since,
        )
        self.errors = 0
        self._delay = self.first_delay


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
