"""System checks for the ``OUTBOX`` setting, each with a stable id and a hint.

Every numeric setting has a finite range, defined here once (``RANGES``, ``RETRY_RANGES``,
``RETENTION_RANGE``) and listed in ``docs/configuration.md``; ``run_outbox_worker``'s options reuse
them. The ranges keep out values that pass a plain "> 0" test and then misbehave: NaN (which
compares false with everything), infinities, intervals short enough to hammer the database, and
delays whose datetimes overflow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

from .conf import DEFAULTS, HEALTH_KEYS, QUEUE_KEYS, RETENTION_KEYS, RETRY_KEYS
from .serialization import brief, text_error

QUEUE_NAME_MAX_LENGTH = 100
#: Ranges of the integer columns these settings end up in.
INTEGER_MAX = 2**31 - 1
PRIORITY_MIN, PRIORITY_MAX = -(2**31), INTEGER_MAX
MAX_ATTEMPTS_MAX = INTEGER_MAX

MINUTE, HOUR, DAY = 60, 3600, 86400

#: Each loop of a worker (claims when idle, heartbeats) runs at most 100 times a second.
POLL_SECONDS_MIN = 0.01
POLL_SECONDS_MAX = HOUR
HEARTBEAT_SECONDS_MIN = 0.01
HEARTBEAT_SECONDS_MAX = HOUR
LEASE_SECONDS_MIN = 1
LEASE_SECONDS_MAX = 7 * DAY
#: A lease outlives at least this many heartbeats, so that one late heartbeat loses nothing.
HEARTBEATS_PER_LEASE = 3
SHUTDOWN_TIMEOUT_MAX = DAY
CONCURRENCY_MAX = 1_000
PROCESSES_MAX = 256
PREFETCH_MAX = 100_000
ERROR_HISTORY_MAX = 1_000
#: Far below what ``timedelta`` (about 1e14 s) and database datetimes (year 9999) can hold.
RETRY_DELAY_MAX = 30 * DAY
RETRY_FACTOR_MAX = 100
RETENTION_MAX = 3650 * DAY


def _number_text(number: float) -> str:
    """Return a bound as the docs write it: ``2592000``, ``0.01``."""
    return str(int(number)) if number == int(number) else f"{number:g}"


def _seconds_text(seconds: float) -> str:
    """Return a bound in seconds as the docs write it: ``604800 (7 days)``."""
    text = _number_text(seconds)
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
            low, high = _number_text(self.minimum), _number_text(self.maximum)
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
        "A worker extends its leases and prunes old jobs this often; shorter hammers the database.",
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
#: Settings whose problems are reported as E004 (durations) and E005 (counts).
DURATIONS = ("LEASE_SECONDS", "HEARTBEAT_SECONDS", "POLL_SECONDS", "SHUTDOWN_TIMEOUT")
COUNTS = ("MAX_ATTEMPTS", "CONCURRENCY", "PROCESSES", "ERROR_HISTORY", "PREFETCH")

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


def queue_name_error(name: object) -> str | None:
    """Return why ``name`` is not a usable queue name, or ``None`` when it is."""
    if not isinstance(name, str) or not name.strip():
        return f"A queue name must be a non-empty string, not {brief(name)}."
    if len(name) > QUEUE_NAME_MAX_LENGTH:
        return f"Queue name {name[:20]!r}... is longer than {QUEUE_NAME_MAX_LENGTH} characters."
    if problem := text_error(name):
        # Every enqueue to such a queue would be refused.
        return f"The queue name {brief(name)} {problem}."
    return None


def _sorted_names(keys: Iterable[object]) -> list[str]:
    """Return ``keys`` as short reprs, sorted: a dict's keys may be of types that don't
    compare (0 and ""), or an int too long to print."""
    return sorted(brief(key) for key in keys)


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


def _retry_errors(retry: object, where: str) -> list[CheckMessage]:
    if not isinstance(retry, dict):
        return [
            Error(
                f"{where} must be a dict, not {type(retry).__name__}.",
                hint=f"Use keys among {sorted(RETRY_KEYS)}.",
                id="django_outbox.E007",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = _sorted_names(set(retry) - RETRY_KEYS)
    if unknown:
        errors.append(
            Error(
                f"{where} has unknown keys {unknown}.",
                hint=f"Use keys among {sorted(RETRY_KEYS)}.",
                id="django_outbox.E007",
            )
        )
    for key in sorted(RETRY_KEYS & set(retry)):
        bounds = RETRY_RANGES[key]
        if problem := bounds.problem(retry[key]):
            errors.append(
                Error(
                    f"{where}['{key}'] {problem}",
                    hint=f"{bounds.why} The default is {DEFAULTS['RETRY'][key]}.",
                    id="django_outbox.E007",
                )
            )
    return errors


def _unknown_keys_errors(
    setting: str, value: dict[Any, Any], keys: frozenset[str], hint: str, check_id: str
) -> list[CheckMessage]:
    """The error for keys of ``OUTBOX[setting]`` outside ``keys``, if there are any."""
    unknown = _sorted_names(set(value) - keys)
    if not unknown:
        return []
    return [Error(f"OUTBOX['{setting}'] has unknown keys {unknown}.", hint=hint, id=check_id)]


def _retention_errors(retention: object) -> list[CheckMessage]:
    hint = (
        f"Use keys among {sorted(RETENTION_KEYS)}, each {RETENTION_RANGE} or None to keep "
        "those jobs forever."
    )
    if not isinstance(retention, dict):
        return [Error("OUTBOX['RETENTION'] must be a dict.", hint=hint, id="django_outbox.E010")]
    errors = _unknown_keys_errors(
        "RETENTION", retention, RETENTION_KEYS, hint, "django_outbox.E010"
    )
    for key in sorted(set(retention) & RETENTION_KEYS):
        value = retention[key]
        if value is not None and (problem := RETENTION_RANGE.problem(value)):
            errors.append(
                Error(
                    f"OUTBOX['RETENTION']['{key}'] {problem}",
                    hint=hint,
                    id="django_outbox.E010",
                )
            )
    return errors


def _queues_errors(queues: object) -> list[CheckMessage]:
    hint = f'Use {{"queue-name": {{...}}}} with keys among {sorted(QUEUE_KEYS)}.'
    if not isinstance(queues, dict):
        return [Error("OUTBOX['QUEUES'] must be a dict.", hint=hint, id="django_outbox.E008")]
    errors: list[CheckMessage] = []
    for name, options in queues.items():
        problem = queue_name_error(name)
        if problem:
            errors.append(Error(problem, hint=hint, id="django_outbox.E008"))
            continue
        if not isinstance(options, dict):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}] must be a dict.",
                    hint=hint,
                    id="django_outbox.E008",
                )
            )
            continue
        unknown = _sorted_names(set(options) - QUEUE_KEYS)
        if unknown:
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}] has unknown options {unknown}.",
                    hint=hint,
                    id="django_outbox.E008",
                )
            )
        if "MAX_ATTEMPTS" in options and (problem := max_attempts_error(options["MAX_ATTEMPTS"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['MAX_ATTEMPTS']: {problem}",
                    hint="The first run counts as an attempt: 1 means never retry.",
                    id="django_outbox.E008",
                )
            )
        if "PRIORITY" in options and (problem := priority_error(options["PRIORITY"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['PRIORITY']: {problem}",
                    hint="Higher priorities run first; the default is 0.",
                    id="django_outbox.E008",
                )
            )
        if "RETRY" in options:
            errors += _retry_errors(options["RETRY"], f"OUTBOX['QUEUES'][{brief(name)}]['RETRY']")
        if "PACE_RETRIES" in options and not isinstance(options["PACE_RETRIES"], bool):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['PACE_RETRIES'] must be True or False, "
                    f"not {brief(options['PACE_RETRIES'])}.",
                    hint="True (the default) holds due retries back when a retry fails again.",
                    id="django_outbox.E008",
                )
            )
        if "MAX_SIZE" in options and (problem := max_size_error(options["MAX_SIZE"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['MAX_SIZE']: {problem}",
                    hint="The most jobs that may wait in the queue; leave it out for no bound.",
                    id="django_outbox.E008",
                )
            )
    return errors


def max_size_error(max_size: object) -> str | None:
    """Return why ``max_size`` is not a queue's MAX_SIZE, or None."""
    if max_size is None:
        return None
    if not isinstance(max_size, int) or isinstance(max_size, bool):
        return f"must be a whole number or None, not {brief(max_size)}."
    if not 1 <= max_size <= INTEGER_MAX:
        return f"must be from 1 to {INTEGER_MAX}, not {_number_text(max_size)}."
    return None


def _health_errors(health: object) -> list[CheckMessage]:
    hint = f"Use keys among {sorted(HEALTH_KEYS)}, each a number of seconds."
    if not isinstance(health, dict):
        return [Error("OUTBOX['HEALTH'] must be a dict.", hint=hint, id="django_outbox.E020")]
    errors = _unknown_keys_errors("HEALTH", health, HEALTH_KEYS, hint, "django_outbox.E020")
    for key in sorted(set(health) & HEALTH_KEYS):
        bounds = HEALTH_RANGES[key]
        if problem := bounds.problem(health[key]):
            errors.append(
                Error(
                    f"OUTBOX['HEALTH']['{key}'] {problem}",
                    hint=f"{bounds.why} The default is {DEFAULTS['HEALTH'][key]}.",
                    id="django_outbox.E021",
                )
            )
    return errors


def _context_errors(context: object) -> list[CheckMessage]:
    from .captured import variable_error

    hint = (
        'A list of dotted paths to contextvars.ContextVar objects, e.g. ["myapp.log.request_id"].'
    )
    if not isinstance(context, list | tuple):
        return [Error("OUTBOX['CONTEXT'] must be a list.", hint=hint, id="django_outbox.E011")]
    return [
        Error(f"OUTBOX['CONTEXT']: {problem}", hint=hint, id="django_outbox.E011")
        for path in context
        if (problem := variable_error(path))
    ]


def outbox_setting_errors(user: object) -> list[CheckMessage]:
    """Return every problem with ``user``, the value of ``settings.OUTBOX``."""
    if not isinstance(user, dict):
        return [
            Error(
                "settings.OUTBOX must be a dict.",
                hint="Set OUTBOX = {} or leave it out to use the defaults.",
                id="django_outbox.E001",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = _sorted_names(set(user) - set(DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"settings.OUTBOX has unknown keys {unknown}.",
                hint=f"Known keys are {sorted(DEFAULTS)}; check the spelling.",
                id="django_outbox.E002",
            )
        )
    merged = {**DEFAULTS, **user}
    database = merged["DATABASE"]
    if not isinstance(database, str) or database not in settings.DATABASES:
        errors.append(
            Error(
                f"OUTBOX['DATABASE'] is {brief(merged['DATABASE'])}, which is not in DATABASES.",
                hint=f"Use one of {sorted(settings.DATABASES)}.",
                id="django_outbox.E003",
            )
        )
    for key in DURATIONS + COUNTS:
        bounds = RANGES[key]
        if problem := bounds.problem(merged[key]):
            errors.append(
                Error(
                    f"OUTBOX['{key}'] {problem}",
                    hint=f"{bounds.why} The default is {DEFAULTS[key]}.",
                    id="django_outbox.E004" if key in DURATIONS else "django_outbox.E005",
                )
            )
    lease, heartbeat = merged["LEASE_SECONDS"], merged["HEARTBEAT_SECONDS"]
    if (
        not RANGES["LEASE_SECONDS"].problem(lease)
        and not RANGES["HEARTBEAT_SECONDS"].problem(heartbeat)
        and heartbeat * HEARTBEATS_PER_LEASE > lease
    ):
        errors.append(
            Error(
                f"OUTBOX['LEASE_SECONDS'] ({lease}) must be at least {HEARTBEATS_PER_LEASE} "
                f"times OUTBOX['HEARTBEAT_SECONDS'] ({heartbeat}).",
                hint="Otherwise one late heartbeat lets another worker take over a running job: "
                f"raise LEASE_SECONDS to {heartbeat * HEARTBEATS_PER_LEASE:g} or more, or lower "
                "HEARTBEAT_SECONDS.",
                id="django_outbox.E006",
            )
        )
    if "RETRY" in user:
        errors += _retry_errors(user["RETRY"], "OUTBOX['RETRY']")
    if "RETENTION" in user:
        errors += _retention_errors(user["RETENTION"])
    if "HEALTH" in user:
        errors += _health_errors(user["HEALTH"])
    if "CONTEXT" in user:
        errors += _context_errors(user["CONTEXT"])
    if "CODEC" in user:
        from .codecs import setting_error

        if problem := setting_error(user["CODEC"]):
            errors.append(
                Error(
                    f"OUTBOX['CODEC'] {problem}",
                    hint="The dotted path of an object (or class) with encode() and decode().",
                    id="django_outbox.E012",
                )
            )
    if "CRON" in user or "CRON_TIMEZONE" in user:
        from .cron.checks import setting_errors as cron_setting_errors

        errors += cron_setting_errors(user)
    errors += _queues_errors(merged["QUEUES"])
    problem = queue_name_error(merged["DEFAULT_QUEUE"])
    if problem:
        errors.append(
            Error(
                f"OUTBOX['DEFAULT_QUEUE'] is invalid: {problem}",
                hint='The default is "default".',
                id="django_outbox.E009",
            )
        )
    return errors


@register(Tags.compatibility)
def check_outbox_setting(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Validate ``settings.OUTBOX``."""
    return outbox_setting_errors(getattr(settings, "OUTBOX", {}))


@register(Tags.compatibility)
def check_cron_entries(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Validate cron entries against the registered tasks (``django_outbox.cron.checks``)."""
    from .cron.checks import entry_errors

    return entry_errors()
