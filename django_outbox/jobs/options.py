"""The options of an enqueue, declared once, and their checks.

``enqueue()``, ``enqueue_many()``, ``Task.enqueue()``, ``Task.enqueue_many()`` and
``Task.using()`` take the keywords ``EnqueueOptions`` declares; every check below runs before
anything is written, so bad input raises ``EnqueueError`` and leaves the caller's transaction
usable.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.utils import timezone

from ..exceptions import EnqueueError
from ..validation.bounds import DEPENDENCIES_MAX, MAX_DELAY, max_attempts_error, priority_error
from ..validation.text import brief, key_error, queue_name_error

if TYPE_CHECKING:
    from ..models import Job


class EnqueueOptions(TypedDict, total=False):
    """How to enqueue a job: when, where, and with which guarantees.

    ``delay`` (a timedelta or seconds) or ``run_at`` (an aware datetime) postpone it;
    ``priority``, ``queue`` and ``max_attempts`` override the task's; jobs with the same
    ``lock`` run one at a time, in order; ``depends_on`` (jobs or ids) must all succeed
    first; ``unique_key`` (with ``unique_while`` "pending" or "unfinished", and
    ``on_duplicate`` "return" or "raise") keeps a second job with the key from being written;
    jobs with a ``fair_key`` are served key by key in turn; ``limit_key`` names whose share of
    per-key concurrency caps and rate limits the job uses (by default its ``fair_key``).
    ``django_outbox.enqueue`` says each in full.
    """

    delay: datetime.timedelta | float | None
    run_at: datetime.datetime | None
    priority: int | None
    queue: str | None
    max_attempts: int | None
    lock: str | None
    depends_on: Job | int | Iterable[Job | int] | None
    unique_key: str | None
    unique_while: str
    on_duplicate: str
    fair_key: str | None
    limit_key: str | None


#: Every option's name.
OPTION_NAMES = EnqueueOptions.__optional_keys__
#: The options that make one job wait for, or stand in for, another: not for a batch.
SINGLE_JOB_OPTIONS = frozenset({"depends_on", "unique_key", "unique_while", "on_duplicate"})
#: ``unique_while``: which jobs with the key make an enqueue a duplicate.
UNIQUE_SCOPES = ("pending", "unfinished")
#: ``on_duplicate``: what enqueue does with a duplicate.
ON_DUPLICATE = ("return", "raise")


def check_names(options: Mapping[str, Any], caller: str, *, batch: bool = False) -> None:
    """Raise TypeError, as Python does for an unexpected keyword, for a keyword that is not an
    option of ``caller``."""
    allowed = OPTION_NAMES - SINGLE_JOB_OPTIONS if batch else OPTION_NAMES
    unknown = sorted(set(options) - allowed)
    if not unknown:
        return
    if batch and set(unknown) <= SINGLE_JOB_OPTIONS:
        raise TypeError(
            f"{caller} takes no {', '.join(unknown)}: they apply to one job at a time. "
            "Call enqueue() for each job instead."
        )
    raise TypeError(
        f"{caller} got an unknown option {', '.join(map(repr, unknown))}. Its options are "
        f"{', '.join(sorted(allowed))}."
    )


def check_job_options(options: Mapping[str, Any]) -> None:
    """Raise EnqueueError for options no job may have: a queue, priority or key of the wrong
    form, or options that exclude each other."""
    queue, priority = options.get("queue"), options.get("priority")
    lock, fair_key = options.get("lock"), options.get("fair_key")
    if queue is not None and (problem := queue_name_error(queue)):
        raise EnqueueError(problem)
    if priority is not None and (problem := priority_error(priority)):
        raise EnqueueError(problem)
    max_attempts = options.get("max_attempts")
    if max_attempts is not None and (problem := max_attempts_error(max_attempts)):
        raise EnqueueError(problem)
    if problem := (
        key_error("lock", lock)
        or key_error("fair_key", fair_key)
        or key_error("limit_key", options.get("limit_key"))
    ):
        raise EnqueueError(problem)
    if fair_key is not None and lock is not None:
        raise EnqueueError(
            "A job takes lock or fair_key, not both: a key's jobs run either one at a time in "
            "order (lock) or in turn with other keys' (fair_key)."
        )


def check_unique_options(options: Mapping[str, Any]) -> None:
    """Raise EnqueueError for a unique_key, unique_while or on_duplicate of the wrong form."""
    unique_while = options.get("unique_while", "pending")
    on_duplicate = options.get("on_duplicate", "return")
    if problem := key_error("unique_key", options.get("unique_key")):
        raise EnqueueError(problem)
    if unique_while not in UNIQUE_SCOPES:
        raise EnqueueError(
            f"unique_while must be one of {UNIQUE_SCOPES}, not {brief(unique_while)}."
        )
    if on_duplicate not in ON_DUPLICATE:
        raise EnqueueError(
            f"on_duplicate must be one of {ON_DUPLICATE}, not {brief(on_duplicate)}."
        )


def run_at_of(
    delay: datetime.timedelta | float | None, run_at: datetime.datetime | None
) -> datetime.datetime | None:
    """Return when the job may run; None means now, by the database's clock."""
    if delay is not None and run_at is not None:
        raise EnqueueError("Pass delay or run_at, not both.")
    if run_at is not None:
        return _checked_run_at(run_at)
    if delay is None:
        return None
    seconds: float
    if isinstance(delay, datetime.timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = delay
    else:
        raise EnqueueError(
            f"delay must be a timedelta or a number of seconds, not {type(delay).__name__}."
        )
    # An int may be too large for a float: compare it as it is.
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise EnqueueError(f"delay must be a finite number of seconds, not {seconds}.")
    if seconds < 0:
        raise EnqueueError(f"delay must not be negative ({brief(seconds)} s); use 0 to run now.")
    if seconds > MAX_DELAY.total_seconds():
        shown = f"{float(seconds):.6g} s" if seconds < 1e300 else "more than 1e300 s"
        raise EnqueueError(
            f"delay must be at most {MAX_DELAY.days} days "
            f"(django_outbox.validation.bounds.MAX_DELAY), not {shown}."
        )
    if seconds == 0:
        return None
    # This host's clock plus the delay: a skew of milliseconds against the database's clock
    # matters little against a delay, and the value is known without reading the row back.
    return timezone.now() + datetime.timedelta(seconds=seconds)


def _checked_run_at(run_at: datetime.datetime) -> datetime.datetime:
    if not isinstance(run_at, datetime.datetime):
        raise EnqueueError(f"run_at must be a datetime, not {type(run_at).__name__}.")
    if settings.USE_TZ and timezone.is_naive(run_at):
        raise EnqueueError(
            f"run_at {run_at} has no time zone. Pass an aware datetime, e.g. "
            "timezone.now() + timedelta(...) or datetime(..., tzinfo=UTC)."
        )
    try:
        # Stored in UTC (or as naive local time without USE_TZ): PostgreSQL refuses some
        # offsets Python allows (16 hours and more, fractions of a second).
        if settings.USE_TZ:
            run_at = run_at.astimezone(datetime.timezone.utc)
        elif timezone.is_aware(run_at):
            run_at = timezone.make_naive(run_at)
    except OverflowError as error:
        raise EnqueueError(
            f"run_at {run_at} cannot be represented in UTC (it falls outside years 1 to "
            "9999 there)."
        ) from error
    if run_at - timezone.now() > MAX_DELAY:
        raise EnqueueError(
            f"run_at must be at most {MAX_DELAY.days} days from now "
            f"(django_outbox.validation.bounds.MAX_DELAY), not {run_at}."
        )
    return run_at


def dependency_ids(depends_on: Any) -> list[int]:
    """Return the distinct ids ``depends_on`` names (a Job, an id, or an iterable of them)."""
    if depends_on is None:
        return []
    from ..models import Job  # The model needs the app registry; this module must not.

    items = [depends_on] if isinstance(depends_on, Job | int | str) else depends_on
    try:
        items = list(items)
    except TypeError:
        raise EnqueueError(
            "depends_on must be a job, a job's id, or a list of them, not "
            f"{type(depends_on).__name__}."
        ) from None
    ids: list[int] = []
    for item in items:
        if isinstance(item, Job):
            if item.pk is None:
                raise EnqueueError("depends_on names a job that was never saved (it has no id).")
            ids.append(int(item.pk))
        elif isinstance(item, int) and not isinstance(item, bool):
            ids.append(item)
        else:
            raise EnqueueError(
                f"depends_on must name jobs by Job or id (int), not {type(item).__name__}."
            )
    if len(set(ids)) > DEPENDENCIES_MAX:
        raise EnqueueError(
            f"depends_on names {len(set(ids))} jobs; a job may depend on at most "
            f"{DEPENDENCIES_MAX} (django_outbox.validation.bounds.DEPENDENCIES_MAX)."
        )
    return sorted(set(ids))
