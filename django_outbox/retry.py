"""When a failed job runs again: exponential backoff, and the per-task hook that overrides it."""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from .validation.bounds import RETRY_DELAY_MAX, RETRY_FACTOR_MAX

if TYPE_CHECKING:
    from .claimed import ClaimedJob


class _GiveUp:
    def __repr__(self) -> str:
        return "GIVE_UP"


#: Returned by a task's ``retry_strategy`` to fail the job now, whatever attempts remain.
GIVE_UP: Final = _GiveUp()

#: What a ``retry_strategy(job, exc)`` may return: a delay before the next attempt (a timedelta
#: or seconds), ``GIVE_UP``, or ``None`` to fall back on the task's backoff policy.
RetryDecision = datetime.timedelta | float | int | _GiveUp | None
RetryStrategy = Callable[["ClaimedJob", BaseException], RetryDecision]


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, capped.

    The delay after failed attempt ``n`` (1 for the first run) is::

        min(max_delay, base_delay * factor ** (n - 1)) * uniform(1 - jitter, 1 + jitter)

    and never more than ``max_delay``. With the defaults: about 1 s, 2 s, 4 s, ... up to 1 h.
    Jitter spreads retries of jobs that failed together so they don't all come back at once.
    """

    base_delay: float = 1.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= RETRY_DELAY_MAX):
                raise ValueError(
                    f"RetryPolicy.{name} is {value}; it must be seconds from 0 to "
                    f"{RETRY_DELAY_MAX} (30 days)."
                )
        if not (math.isfinite(self.factor) and 1 <= self.factor <= RETRY_FACTOR_MAX):
            raise ValueError(f"RetryPolicy.factor must be from 1 to {RETRY_FACTOR_MAX}.")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter must be between 0 and 1.")

    @classmethod
    def from_setting(cls, value: dict[str, Any]) -> RetryPolicy:
        """Build a policy from a ``RETRY`` dict of the ``OUTBOX`` setting."""
        return cls(
            base_delay=float(value["BASE_DELAY"]),
            factor=float(value["FACTOR"]),
            max_delay=float(value["MAX_DELAY"]),
            jitter=float(value["JITTER"]),
        )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Return the seconds to wait after failed attempt number ``attempt`` (1-based)."""
        # Cap the exponent first: factor ** attempt overflows a float long before attempt 10,000.
        exponent = min(max(attempt - 1, 0), 1024)
        try:
            raw = self.base_delay * self.factor**exponent
        except OverflowError:
            raw = self.max_delay
        capped = min(self.max_delay, raw)
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return min(self.max_delay, capped * spread)


def decision_delay(decision: RetryDecision, where: str) -> float | Literal["give_up"] | None:
    """Normalise what a retry strategy returned: seconds, ``"give_up"``, or ``None`` (default)."""
    if decision is None:
        return None
    if decision is GIVE_UP:
        return "give_up"
    if isinstance(decision, datetime.timedelta):
        seconds = decision.total_seconds()
    elif isinstance(decision, int | float) and not isinstance(decision, bool):
        seconds = float(decision)
    else:
        raise TypeError(
            f"{where} returned {decision!r}; return a timedelta, a number of seconds, "
            "django_outbox.GIVE_UP or None."
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{where} returned {seconds} s; a delay is a finite number >= 0.")
    # A later run_at than a database stores (or than anyone waits for) is the longest retry
    # delay the settings allow.
    return min(seconds, RETRY_DELAY_MAX)
