"""The commands' argument types: numbers within the settings' bounds, durations, and names
(queues, tasks, worker ids) the database can hold.

Each is an argparse ``type``: a value out of range is refused at parsing, with a message that
says what is accepted, before the command touches the database.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable
from typing import Any, Literal

from ..validation.bounds import (
    CONCURRENCY_MAX,
    INTEGER_MAX,
    PREFETCH_AUTO,
    PREFETCH_MAX,
    PROCESSES_MAX,
    SHUTDOWN_TIMEOUT_MAX,
)
from ..validation.text import (
    TASK_NAME_MAX_LENGTH,
    WORKER_ID_MAX_LENGTH,
    name_error,
    queue_name_error,
    worker_id_error,
)

#: Seconds per unit of a duration; a number without a unit is seconds.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest duration accepted: ten years (a typo such as 70000d is refused, not obeyed).
LONGEST = 3650 * 86400


def _number_argument(
    convert: type[int] | type[float], minimum: int, maximum: int, unit: str
) -> Callable[[str], Any]:
    """Return an argparse ``type`` that reads a finite number from ``minimum`` to ``maximum``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise ArgumentTypeError(f"expected {unit}, got {text!r}") from None
        # float() reads "nan" and "inf", which the comparisons below would let through. (Only
        # floats: math.isfinite() overflows on a huge int.)
        if isinstance(value, float) and not math.isfinite(value):
            raise ArgumentTypeError(f"expected a finite number, got {text!r}")
        limit = "seconds" if convert is float else "a number"
        if value < minimum:
            raise ArgumentTypeError(f"expected {limit} >= {minimum}, got {value}")
        if value > maximum:
            raise ArgumentTypeError(f"expected {limit} <= {maximum}, got {value}")
        return value

    return parse


# positive_int also counts jobs (--max-jobs, and outbox_bench's sizes): its maximum is the
# integer columns', not CONCURRENCY_MAX or PROCESSES_MAX.
positive_int = _number_argument(int, 1, INTEGER_MAX, "a whole number")
concurrency_int = _number_argument(int, 1, CONCURRENCY_MAX, "a whole number")
processes_int = _number_argument(int, 1, PROCESSES_MAX, "a whole number")
non_negative_int = _number_argument(int, 0, PREFETCH_MAX, "a whole number")
non_negative_seconds = _number_argument(float, 0, SHUTDOWN_TIMEOUT_MAX, "a number of seconds")
#: Jobs deleted per transaction by outbox_prune (jobs.housekeeping.prune's bound).
batch_size_int = _number_argument(int, 1, 100_000, "a whole number")


def prefetch_argument(text: str) -> int | Literal["auto"]:
    """An argparse ``type``: ``auto`` or a number of jobs to claim ahead (``--prefetch``)."""
    if text == PREFETCH_AUTO:
        return PREFETCH_AUTO
    try:
        return int(non_negative_int(text))
    except ArgumentTypeError:
        raise ArgumentTypeError(
            f"expected {PREFETCH_AUTO} or a whole number from 0 to {PREFETCH_MAX}, got {text!r}"
        ) from None


def worker_id_argument(text: str) -> str:
    """An argparse ``type``: a worker id the worker_id columns hold (not empty, not too long)."""
    if problem := worker_id_error(text):
        raise ArgumentTypeError(problem)
    return text


def worker_id_for_processes(worker_id: str, processes: int) -> str | None:
    """Return why ``worker_id`` is too long once numbered for ``processes`` worker processes
    (``ID-1``, ``ID-2``...), or None."""
    longest = f"{worker_id}-{processes}" if processes > 1 else worker_id
    if len(longest) <= WORKER_ID_MAX_LENGTH:
        return None
    return (
        f"--worker-id: with --processes {processes} the workers are named {worker_id[:10]}...-1 "
        f"to -{processes}, longer than {WORKER_ID_MAX_LENGTH} characters; give a shorter id."
    )


def queue_argument(text: str) -> str:
    """An argparse ``type``: a queue name jobs can have."""
    if problem := queue_name_error(text):
        raise ArgumentTypeError(problem)
    return text


def task_name_argument(text: str) -> str:
    """An argparse ``type``: a task's name (or a Django task's module path) jobs can have."""
    if not text.strip():
        raise ArgumentTypeError("A task name must not be empty.")
    if len(text) > TASK_NAME_MAX_LENGTH:
        raise ArgumentTypeError(
            f"A task name is at most {TASK_NAME_MAX_LENGTH} characters, not {len(text)}."
        )
    if problem := name_error("task", text):
        raise ArgumentTypeError(problem)
    return text


def parse_duration(text: str) -> float:
    """Return the seconds ``text`` names (``90``, ``90s``, ``15m``, ``1h``, ``7d``, ``2w``);
    raise ValueError, saying what is accepted, if none."""
    cleaned = text.strip().lower()
    number, unit = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in UNITS else (cleaned, "s")
    try:
        seconds = float(number) * UNITS[unit]
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration such as 90, 90s, 15m, 1h, 7d or 2w."
        ) from None
    if not math.isfinite(seconds) or not 0 < seconds <= LONGEST:
        raise ValueError(f"{text!r} must be more than 0 and at most 3650 days.")
    return seconds


def duration_argument(text: str) -> float:
    """An argparse ``type``: a duration (``90``, ``15m``, ``1h``, ``7d``, ``2w``) in seconds."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise ArgumentTypeError(str(error)) from None
