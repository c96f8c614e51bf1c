"""Every numeric limit, and the validators of numbers that settings and enqueue share.

Every numeric setting has a finite range, defined here once (``RANGES``, ``RETRY_RANGES``,
``HEALTH_RANGES``, ``RETENTION_RANGE``) and listed in ``docs/configuration.md``;
``run_outbox_worker``'s options reuse them. The ranges keep out values that pass a plain "> 0"
test and then misbehave: NaN (which compares false with everything), infinities, intervals short
enough to hammer the database, and delays whose datetimes overflow.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Final, Literal

from .text import brief

#: Ranges of the integer columns these settings end up in.
INTEGER_MAX = 2**31 - 1
PRIORITY_MIN, PRIORITY_MAX = -(2**31), INTEGER_MAX
MAX_ATTEMPTS_MAX = INTEGER_MAX

MINUTE, HOUR, DAY = 60, 3600, 86400

#: Each loop of a worker (claims when idle, heartbeats) runs at most 20 and 10 times a
#: second: an idle worker at both floors runs under 100 transactions a second (about 80
#: measured by bench/idle_worker.py; 2-3 at the defaults). docs/configuration.md says so.
POLL_SECONDS_MIN = 0.05
POLL_SECONDS_MAX = HOUR
HEARTBEAT_SECONDS_MIN = 0.1
HEARTBEAT_SECONDS_MAX = HOUR
LEASE_SECONDS_MIN = 1
LEASE_SECONDS_MAX = 7 * DAY
#: A lease outlives at least this many heartbeats, so that one late heartbeat loses nothing.
HEARTBEATS_PER_LEASE = 3
SHUTDOWN_TIMEOUT_MAX = DAY
CONCURRENCY_MAX = 1_000
PROCESSES_MAX = 256
PREFETCH_MAX = 100_000
#: The prefetch that follows how long jobs run (``worker.auto_prefetch``), and the default.
PREFETCH_AUTO: Final = "auto"
ERROR_HISTORY_MAX = 1_000
#: Far below what ``timedelta`` (about 1e14 s) and database datetimes (year 9999) can hold.
RETRY_DELAY_MAX = 30 * DAY
RETRY_FACTOR_MAX = 100
RETENTION_MAX = 3650 * DAY
#: The longest max_execute_time or timeout of a task: a week, as the longest lease.
TASK_DURATION_MAX = 7 * DAY
#: The furthest ahead a job may be scheduled (``delay``, ``run_at``) or snoozed: ten years of
#: 365 days. Further is almost always a unit mistake (milliseconds for seconds); and past year
#: 9999 no datetime exists.
MAX_DELAY = datetime.timedelta(days=3650)
#: The most jobs one job may depend on.
DEPENDENCIES_MAX = 1_000


def number_text(number: float) -> str:
    """Return a bound as the docs write it: ``2592000``, ``0.01``."""
    return str(int(number)) if number == int(number) else f"{number:g}"


def _seconds_text(seconds: float) -> str:
    """Return a bound in seconds as the docs write it: ``604800 (7 days)``."""
    text = number_text(seconds)
    for size, unit in ((DAY, "day"), (HOUR, "hour"), (MINUTE, "minute")):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{text} ({count} {unit}{'s' if count > 1 else ''})"
    return text


@dataclass(frozen=True)
class Range:
    """The values one numeric setting may take, and why it has limits."""

    minimum: float
    maximum: float
    why: str
    kind: Literal["seconds", "integer", "number"] = "seconds"
    #: Whether ``minimum`` itself is excluded (retention: "> 0").
    above_minimum: bool = False

    def __str__(self) -> str:
        if self.kind == "seconds":
            low, high = _seconds_text(self.minimum), _seconds_text(self.maximum)
        else:
            low, high = number_text(self.minimum), number_text(self.maximum)
        kind = {"seconds": "a number of seconds", "integer": "an integer"}.get(
            self.kind, "a number"
        )
        if self.above_minimum:
            return f"{kind} > {low} and <= {high}"
        return f"{kind} from {low} to {high}"

    def problem(self, value: object) -> str | None:
        """Return why ``value`` is not in this range, or ``None`` when it is."""
        shown = brief(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"is {shown}, not a number; it must be {self}."
        if self.kind == "integer" and not isinstance(value, int):
            return f"is {shown}, not an integer; it must be {self}."
        # Before the comparisons, which NaN passes whatever they say. Only floats can be
        # non-finite, and math.isfinite() overflows on a huge int.
        if isinstance(value, float) and not math.isfinite(value):
            return f"is {shown}, which is not a finite number; it must be {self}."
        too_low = value <= self.minimum if self.above_minimum else value < self.minimum
        if too_low or value > self.maximum:
            return f"is {shown}, out of range; it must be {self}."
        return None


#: The top-level numeric settings, by key.
RANGES: dict[str, Range] = {
    "POLL_SECONDS": Range(
        POLL_SECONDS_MIN,
        POLL_SECONDS_MAX,
        "An idle worker looks for jobs this often: shorter hammers the database, longer "
        "delays jobs whose wake-up was missed.",
    ),
    "HEARTBEAT_SECONDS": Range(
        HEARTBEAT_SECONDS_MIN,
        HEARTBEAT_SECONDS_MAX,
        "A worker extends its leases this often; shorter hammers the database.",
    ),
    "LEASE_SECONDS": Range(
        LEASE_SECONDS_MIN,
        LEASE_SECONDS_MAX,
        "A job whose worker died runs again this long after its last heartbeat.",
    ),
    "SHUTDOWN_TIMEOUT": Range(
        0, SHUTDOWN_TIMEOUT_MAX, "Running jobs get this long to finish after a stop signal."
    ),
    "MAX_ATTEMPTS": Range(
        1,
        MAX_ATTEMPTS_MAX,
        "The first run counts (1 means never retry); the column is a 32-bit integer.",
        kind="integer",
    ),
    "CONCURRENCY": Range(
        1,
        CONCURRENCY_MAX,
        "Threads per worker process, each with its own database connection.",
        kind="integer",
    ),
    "PROCESSES": Range(
        1, PROCESSES_MAX, "Worker processes under one supervisor; one a core.", kind="integer"
    ),
    "PREFETCH": Range(
        0,
        PREFETCH_MAX,
        "Jobs a worker holds beyond its free threads; each is held in memory and leased.",
        kind="integer",
    ),
    "ERROR_HISTORY": Range(
        0,
        ERROR_HISTORY_MAX,
        "Past errors kept in each job's row; 0 keeps only last_error.",
        kind="integer",
    ),
}

RETRY_RANGES: dict[str, Range] = {
    "BASE_DELAY": Range(0, RETRY_DELAY_MAX, "The delay after the first failed attempt."),
    "MAX_DELAY": Range(0, RETRY_DELAY_MAX, "No retry waits longer than this."),
    "FACTOR": Range(1, RETRY_FACTOR_MAX, "Each delay is the previous one times this.", "number"),
    "JITTER": Range(0, 1, "Each delay varies by up to this fraction of itself.", "number"),
}
HEALTH_RANGES: dict[str, Range] = {
    "ALLOWED_ERROR_SECONDS": Range(
        0, DAY, "A worker in error (database errors) this long is unhealthy; 0: at once."
    ),
    "GRACE_SECONDS": Range(
        0, DAY, "A worker is not called unhealthy in its first seconds (rolling restarts)."
    ),
}
#: Seconds finished jobs are kept (``None``, forever, is allowed beside it).
RETENTION_RANGE = Range(
    0, RETENTION_MAX, "Finished jobs older than this are deleted.", above_minimum=True
)


def prefetch_error(prefetch: object) -> str | None:
    """Return why ``prefetch`` is not a usable ``PREFETCH``, or ``None`` when it is."""
    if prefetch == PREFETCH_AUTO:
        return None
    if isinstance(prefetch, str):
        return f'is {brief(prefetch)}; it must be "{PREFETCH_AUTO}" or {RANGES["PREFETCH"]}.'
    return RANGES["PREFETCH"].problem(prefetch)


def priority_error(priority: object) -> str | None:
    """Return why ``priority`` is not a usable priority, or ``None`` when it is."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        return f"priority must be an integer, not {brief(priority)}."
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        return f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, not {brief(priority)}."
    return None


def max_attempts_error(max_attempts: object) -> str | None:
    """Return why ``max_attempts`` is not usable, or ``None`` when it is."""
    if not (
        isinstance(max_attempts, int)
        and not isinstance(max_attempts, bool)
        and 1 <= max_attempts <= MAX_ATTEMPTS_MAX
    ):
        return (
            f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_MAX} (the first run "
            f"counts; 1 means never retry), not {brief(max_attempts)}."
        )
    return None


def max_size_error(max_size: object) -> str | None:
    """Return why ``max_size`` is not a queue's MAX_SIZE, or None."""
    if max_size is None:
        return None
    if not isinstance(max_size, int) or isinstance(max_size, bool):
        return f"must be a whole number or None, not {brief(max_size)}."
    if not 1 <= max_size <= INTEGER_MAX:
        return f"must be from 1 to {INTEGER_MAX}, not {number_text(max_size)}."
    return None


def snooze_error(seconds: object) -> str | None:
    """Return why ``Snooze(seconds)`` cannot be honoured, or None if it can."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return f"seconds must be a number or a timedelta, not {type(seconds).__name__}."
    # An int may be too large for a float: compare it as it is.
    if (isinstance(seconds, float) and not math.isfinite(seconds)) or seconds < 0:
        return "seconds must be a finite number >= 0."
    if seconds > MAX_DELAY.total_seconds():
        return f"a job may be snoozed for at most {MAX_DELAY.days} days."
    return None


def task_duration_error(option: str, seconds: object) -> str | None:
    """Return why ``seconds`` cannot be a task's ``option`` (max_execute_time, timeout)."""
    if seconds is None or (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and 0 < seconds <= TASK_DURATION_MAX
    ):
        return None
    return (
        f"{option} must be a number of seconds above 0 and at most {TASK_DURATION_MAX} "
        f"(7 days), or None, not {seconds!r}."
    )
