"""System checks for the ``OUTBOX`` setting, each with a stable id and a hint."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

from .conf import DEFAULTS, QUEUE_KEYS, RETENTION_KEYS, RETRY_KEYS

QUEUE_NAME_MAX_LENGTH = 100
#: Ranges of the integer columns these settings end up in.
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
MAX_ATTEMPTS_MAX = 2**31 - 1

POSITIVE_NUMBERS = ("LEASE_SECONDS", "HEARTBEAT_SECONDS", "POLL_SECONDS")
NON_NEGATIVE_NUMBERS = ("SHUTDOWN_TIMEOUT",)
POSITIVE_INTEGERS = ("MAX_ATTEMPTS", "CONCURRENCY", "PROCESSES")
NON_NEGATIVE_INTEGERS = ("ERROR_HISTORY", "PREFETCH")


def queue_name_error(name: object) -> str | None:
    """Return why ``name`` is not a usable queue name, or ``None`` when it is."""
    if not isinstance(name, str) or not name.strip():
        return f"A queue name must be a non-empty string, not {name!r}."
    if len(name) > QUEUE_NAME_MAX_LENGTH:
        return f"Queue name {name[:20]!r}... is longer than {QUEUE_NAME_MAX_LENGTH} characters."
    return None


def priority_error(priority: object) -> str | None:
    """Return why ``priority`` is not a usable priority, or ``None`` when it is."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        return f"priority must be an integer, not {priority!r}."
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        return f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, not {priority}."
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
            f"counts; 1 means never retry), not {max_attempts!r}."
        )
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    unknown = sorted(set(retry) - RETRY_KEYS)
    if unknown:
        errors.append(
            Error(
                f"{where} has unknown keys {unknown}.",
                hint=f"Use keys among {sorted(RETRY_KEYS)}.",
                id="django_outbox.E007",
            )
        )
    for key in sorted(set(retry) & RETRY_KEYS):
        value = retry[key]
        if not _is_number(value):
            valid = False
        elif key == "FACTOR":
            valid = value >= 1
        elif key == "JITTER":
            valid = 0 <= value <= 1
        else:
            valid = value >= 0
        if not valid:
            errors.append(
                Error(
                    f"{where}['{key}'] is {value!r}, which is not a valid value.",
                    hint="BASE_DELAY and MAX_DELAY are seconds >= 0, FACTOR is >= 1, "
                    "JITTER is a fraction between 0 and 1.",
                    id="django_outbox.E007",
                )
            )
    return errors


def _retention_errors(retention: object) -> list[CheckMessage]:
    hint = (
        f"Use keys among {sorted(RETENTION_KEYS)}, each a number of seconds > 0 or None to keep "
        "those jobs forever."
    )
    if not isinstance(retention, dict):
        return [Error("OUTBOX['RETENTION'] must be a dict.", hint=hint, id="django_outbox.E010")]
    errors: list[CheckMessage] = []
    unknown = sorted(set(retention) - RETENTION_KEYS)
    if unknown:
        errors.append(
            Error(
                f"OUTBOX['RETENTION'] has unknown keys {unknown}.",
                hint=hint,
                id="django_outbox.E010",
            )
        )
    for key in sorted(set(retention) & RETENTION_KEYS):
        value = retention[key]
        if value is not None and not (_is_number(value) and value > 0):
            errors.append(
                Error(
                    f"OUTBOX['RETENTION']['{key}'] is {value!r}, which is not a valid value.",
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
                    f"OUTBOX['QUEUES'][{name!r}] must be a dict.",
                    hint=hint,
                    id="django_outbox.E008",
                )
            )
            continue
        unknown = sorted(set(options) - QUEUE_KEYS)
        if unknown:
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{name!r}] has unknown options {unknown}.",
                    hint=hint,
                    id="django_outbox.E008",
                )
            )
        if "MAX_ATTEMPTS" in options and (problem := max_attempts_error(options["MAX_ATTEMPTS"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{name!r}]['MAX_ATTEMPTS']: {problem}",
                    hint="The first run counts as an attempt: 1 means never retry.",
                    id="django_outbox.E008",
                )
            )
        if "PRIORITY" in options and (problem := priority_error(options["PRIORITY"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{name!r}]['PRIORITY']: {problem}",
                    hint="Higher priorities run first; the default is 0.",
                    id="django_outbox.E008",
                )
            )
        if "RETRY" in options:
            errors += _retry_errors(options["RETRY"], f"OUTBOX['QUEUES'][{name!r}]['RETRY']")
    return errors


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
    unknown = sorted(set(user) - set(DEFAULTS))
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
                f"OUTBOX['DATABASE'] is {merged['DATABASE']!r}, which is not in DATABASES.",
                hint=f"Use one of {sorted(settings.DATABASES)}.",
                id="django_outbox.E003",
            )
        )
    for key in POSITIVE_NUMBERS + NON_NEGATIVE_NUMBERS:
        value = merged[key]
        minimum_ok = _is_number(value) and (value > 0 if key in POSITIVE_NUMBERS else value >= 0)
        if not minimum_ok:
            errors.append(
                Error(
                    f"OUTBOX['{key}'] is {value!r}; it must be a number of seconds "
                    f"{'> 0' if key in POSITIVE_NUMBERS else '>= 0'}.",
                    hint=f"The default is {DEFAULTS[key]}.",
                    id="django_outbox.E004",
                )
            )
    for key in POSITIVE_INTEGERS + NON_NEGATIVE_INTEGERS:
        value = merged[key]
        if not (
            _is_integer(value)
            and (1 if key in POSITIVE_INTEGERS else 0) <= value <= MAX_ATTEMPTS_MAX
        ):
            errors.append(
                Error(
                    f"OUTBOX['{key}'] is {value!r}; it must be an integer "
                    f"from {'1' if key in POSITIVE_INTEGERS else '0'} to {MAX_ATTEMPTS_MAX}.",
                    hint=f"The default is {DEFAULTS[key]}.",
                    id="django_outbox.E005",
                )
            )
    lease, heartbeat = merged["LEASE_SECONDS"], merged["HEARTBEAT_SECONDS"]
    if _is_number(lease) and _is_number(heartbeat) and heartbeat * 2 > lease:
        errors.append(
            Error(
                f"OUTBOX['HEARTBEAT_SECONDS'] ({heartbeat}) must be at most half of "
                f"OUTBOX['LEASE_SECONDS'] ({lease}).",
                hint="Otherwise one late heartbeat lets another worker take over a running job.",
                id="django_outbox.E006",
            )
        )
    if "RETRY" in user:
        errors += _retry_errors(user["RETRY"], "OUTBOX['RETRY']")
    if "RETENTION" in user:
        errors += _retention_errors(user["RETENTION"])
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
