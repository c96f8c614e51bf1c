"""Concurrency caps and rate limits as declared: what a valid one is, and what a rate means.

A cap is a whole number of jobs running at once. A rate is text, as Celery writes it:
``"10/s"``, ``"600/m"``, ``"1000/h"``, or with a period of several units, ``"1/500ms"``,
``"5/10s"``: at most that many starts per period, in bursts of at most that many.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from .text import brief

#: The largest cap or rate count: far above any real quota, and within a 32-bit integer.
LIMIT_MAX = 1_000_000
#: A rate's shortest and longest period, in seconds.
PERIOD_MIN = 0.001
PERIOD_MAX = 86_400.0
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|s|m|h|d)\s*$")
#: The names a limit has on ``@task`` and, upper-cased, in ``OUTBOX["QUEUES"]``.
CAP_OPTIONS = ("concurrency", "concurrency_per_key")
RATE_OPTIONS = ("rate_limit", "rate_limit_per_key")
LIMIT_OPTIONS = CAP_OPTIONS + RATE_OPTIONS


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts per ``period`` seconds: a token bucket of ``count`` tokens,
    refilled at ``count / period`` tokens a second."""

    count: int
    period: float

    @property
    def per_second(self) -> float:
        return self.count / self.period

    @property
    def burst(self) -> int:
        """The most starts at once (the bucket's size)."""
        return self.count

    def __str__(self) -> str:
        for unit, seconds in (("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001)):
            if self.period == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.period:g}s"


@functools.lru_cache(maxsize=256)
def parse_rate(text: str) -> Rate:
    """Return the Rate ``text`` declares (``"10/s"``, ``"1/500ms"``); raise ValueError with
    what is wrong if it declares none."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{brief(text)} is not a rate: write starts per period as 'N/unit' or "
            "'N/<number><unit>', e.g. '10/s', '600/m', '1/500ms' (units ms, s, m, h, d)."
        )
    count_text, multiple, unit = match.groups()
    count = int(count_text)
    period = float(multiple or 1) * UNITS[unit]
    if not 1 <= count <= LIMIT_MAX:
        raise ValueError(f"{brief(text)}: the count must be from 1 to {LIMIT_MAX}.")
    if not (math.isfinite(period) and PERIOD_MIN <= period <= PERIOD_MAX):
        raise ValueError(f"{brief(text)}: the period must be from 1 ms to 1 day.")
    return Rate(count, period)


def rate_error(option: str, value: object) -> str | None:
    """Return why ``value`` cannot be ``option`` (a rate), or None if it can (None too)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{option} must be a rate such as '10/s', or None, not {brief(value)}."
    try:
        parse_rate(value)
    except ValueError as error:
        return f"{option}: {error}"
    return None


def cap_error(option: str, value: object) -> str | None:
    """Return why ``value`` cannot be ``option`` (a concurrency cap), or None if it can."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LIMIT_MAX:
        return (
            f"{option} must be a whole number of jobs from 1 to {LIMIT_MAX}, or None, not "
            f"{brief(value)}."
        )
    return None


def limit_error(option: str, value: object) -> str | None:
    """Return why ``value`` cannot be the limit ``option`` (one of ``LIMIT_OPTIONS``, or its
    setting's upper-case name)."""
    if option.lower() in CAP_OPTIONS:
        return cap_error(option, value)
    return rate_error(option, value)
