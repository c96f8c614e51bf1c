"""Cron schedules: what ``@task(cron=...)`` and the entries of ``OUTBOX["CRON"]`` may say.

Five fields (minute, hour, day of month, month, day of week) as Debian's cron reads them, or one
of the usual shorthands (``@hourly``, ``@daily``...). A sixth field (seconds), which ``cronsim``
accepts, is refused: the scheduler wakes at most once a minute. ``django_outbox.cron`` computes
the ticks of the fields this returns.
"""

from __future__ import annotations

import datetime
import functools
import zoneinfo
from typing import Any

from cronsim import CronSim, CronSimError
from django.core.checks import CheckMessage, Error

from .bounds import priority_error
from .text import brief, queue_name_error, text_error

#: The keys of an ``OUTBOX["CRON"]`` entry; TASK and SCHEDULE are required.
ENTRY_KEYS = frozenset({"TASK", "SCHEDULE", "PAYLOAD", "QUEUE", "PRIORITY", "TIMEZONE"})
REQUIRED_KEYS = frozenset({"TASK", "SCHEDULE"})
#: The longest entry name (the column's length).
NAME_MAX_LENGTH = 200

#: The shorthands Vixie and Debian cron read, as five fields.
SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def cron_fields(text: object) -> str:
    """Return the five fields ``text`` names (a shorthand spelled out); raise ValueError, with
    the reason, for anything else."""
    if not isinstance(text, str):
        raise ValueError(f"A cron expression is a string, not {type(text).__name__}.")
    fields = SHORTHANDS.get(text.strip().lower(), text.strip())
    if len(fields.split()) != 5:
        raise ValueError(
            f"{text!r} is not a cron expression: it needs five fields (minute hour "
            "day-of-month month day-of-week, e.g. '*/5 * * * *') or a shorthand such as "
            "'@daily'."
        )
    try:
        CronSim(fields, datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc))
    except CronSimError as error:
        raise ValueError(f"{text!r} is not a valid cron expression: {error}.") from None
    return fields


@functools.lru_cache(maxsize=256)
def time_zone(name: str) -> datetime.tzinfo:
    """Return the zone named ``name`` ("UTC", "Europe/Paris"); raise ValueError."""
    if name == "UTC":
        return datetime.timezone.utc
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError) as error:
        raise ValueError(
            f"{name!r} is not a time zone name this system knows (an IANA name such as "
            "'UTC' or 'Europe/Paris')."
        ) from error


EXAMPLE = (
    'OUTBOX["CRON"] = {"nightly-cleanup": {"TASK": "myapp.tasks.cleanup", "SCHEDULE": "0 3 * * *"}}'
)
SCHEDULE_HINT = (
    "Five fields: minute hour day-of-month month day-of-week, e.g. '*/5 * * * *' (every five "
    "minutes) or '0 3 * * 1-5' (03:00 on weekdays), or @hourly, @daily, @weekly, @monthly."
)
ZONE_HINT = "An IANA time zone name such as 'UTC' (the default) or 'Europe/Paris'."


def name_error(name: object) -> str | None:
    """Return why ``name`` cannot name a cron entry, or None."""
    if not isinstance(name, str) or not name.strip():
        return f"is {brief(name)}; an entry's name must be a non-empty string."
    if len(name) > NAME_MAX_LENGTH:
        return f"is longer than {NAME_MAX_LENGTH} characters."
    if problem := text_error(name):
        return problem
    return None


def cron_setting_errors(user: dict[str, Any]) -> list[CheckMessage]:
    """Return the problems of ``OUTBOX["CRON"]`` and ``OUTBOX["CRON_TIMEZONE"]`` in ``user``
    (E030-E035), but for whether each PAYLOAD is JSON (``django_outbox.cron.checks``)."""
    errors: list[CheckMessage] = []
    default_zone = user.get("CRON_TIMEZONE", "UTC")
    if not _zone_ok(default_zone):
        errors.append(
            Error(
                f"OUTBOX['CRON_TIMEZONE'] is {brief(default_zone)}, not a known time zone.",
                hint=ZONE_HINT,
                id="django_outbox.E034",
            )
        )
        default_zone = "UTC"
    entries = user.get("CRON", {})
    if not isinstance(entries, dict):
        return [
            *errors,
            Error(
                "OUTBOX['CRON'] must be a dict of entries by name.",
                hint=f"For example {EXAMPLE}.",
                id="django_outbox.E030",
            ),
        ]
    for name, options in entries.items():
        errors += _entry_setting_errors(name, options, default_zone)
    return errors


def _entry_setting_errors(name: object, options: object, default_zone: str) -> list[CheckMessage]:
    where = f"OUTBOX['CRON'][{brief(name)}]"
    if problem := name_error(name):
        return [
            Error(
                f"The name of {where} {problem}",
                hint=f"For example {EXAMPLE}.",
                id="django_outbox.E030",
            )
        ]
    if not isinstance(options, dict):
        return [
            Error(
                f"{where} must be a dict.", hint=f"For example {EXAMPLE}.", id="django_outbox.E030"
            )
        ]
    errors: list[CheckMessage] = []
    keys_hint = f"Keys: TASK and SCHEDULE, and optionally {sorted(ENTRY_KEYS - REQUIRED_KEYS)}."
    unknown = sorted(brief(key) for key in set(options) - ENTRY_KEYS)
    if unknown:
        errors.append(
            Error(f"{where} has unknown keys {unknown}.", hint=keys_hint, id="django_outbox.E030")
        )
    missing = sorted(REQUIRED_KEYS - set(options))
    if missing:
        errors.append(Error(f"{where} lacks {missing}.", hint=keys_hint, id="django_outbox.E030"))
    task = options.get("TASK")
    if "TASK" in options and (not isinstance(task, str) or not task):
        errors.append(
            Error(
                f"{where}['TASK'] is {brief(task)}, not a task's name.",
                hint="The registered name of a task: its dotted path, or its @task(name=...).",
                id="django_outbox.E032",
            )
        )
    zone = options.get("TIMEZONE", default_zone)
    if not _zone_ok(zone):
        errors.append(
            Error(
                f"{where}['TIMEZONE'] is {brief(zone)}, not a known time zone.",
                hint=ZONE_HINT,
                id="django_outbox.E034",
            )
        )
        zone = "UTC"
    if "SCHEDULE" in options:
        try:
            cron_fields(options["SCHEDULE"])
        except ValueError as error:
            errors.append(
                Error(f"{where}['SCHEDULE']: {error}", hint=SCHEDULE_HINT, id="django_outbox.E031")
            )
    errors += _job_option_errors(where, options)
    return errors


def _job_option_errors(where: str, options: dict[Any, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    if options.get("QUEUE") is not None and (problem := queue_name_error(options["QUEUE"])):
        errors.append(
            Error(
                f"{where}['QUEUE']: {problem}",
                hint="Leave it out for the task's queue.",
                id="django_outbox.E035",
            )
        )
    if options.get("PRIORITY") is not None and (problem := priority_error(options["PRIORITY"])):
        errors.append(
            Error(
                f"{where}['PRIORITY']: {problem}",
                hint="Leave it out for the task's priority.",
                id="django_outbox.E035",
            )
        )
    return errors


def _zone_ok(zone: object) -> bool:
    if not isinstance(zone, str):
        return False
    try:
        time_zone(zone)
    except ValueError:
        return False
    return True
