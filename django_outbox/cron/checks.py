"""System checks of cron entries: ``OUTBOX["CRON"]``, ``OUTBOX["CRON_TIMEZONE"]`` (E030-E035).

``setting_errors`` looks at the setting alone (``conf`` refuses to build settings it faults);
``entry_errors`` also needs the registered tasks, so it runs with the other system checks,
after every app's tasks module was imported.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error

from ..serialization import brief, text_error
from .entries import ENTRY_KEYS, NAME_MAX_LENGTH, REQUIRED_KEYS
from .expressions import CronExpression, CronExpressionError, time_zone

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


def setting_errors(user: dict[str, Any]) -> list[CheckMessage]:
    """Return the problems of ``OUTBOX["CRON"]`` and ``OUTBOX["CRON_TIMEZONE"]`` in ``user``."""
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
            CronExpression(options["SCHEDULE"], zone)
        except CronExpressionError as error:
            errors.append(
                Error(f"{where}['SCHEDULE']: {error}", hint=SCHEDULE_HINT, id="django_outbox.E031")
            )
    errors += _job_option_errors(where, options)
    return errors


def _job_option_errors(where: str, options: dict[Any, Any]) -> list[CheckMessage]:
    from ..checks import priority_error, queue_name_error
    from ..exceptions import PayloadError
    from ..serialization import encode

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
    if "PAYLOAD" in options:
        try:
            encode(options["PAYLOAD"], f"{where}['PAYLOAD']")
        except PayloadError as error:
            errors.append(
                Error(
                    str(error),
                    hint="A payload is JSON: dicts, lists, strings, numbers, and dates.",
                    id="django_outbox.E035",
                )
            )
    return errors


def _zone_ok(zone: object) -> bool:
    if not isinstance(zone, str):
        return False
    try:
        time_zone(zone)
    except CronExpressionError:
        return False
    return True


def entry_errors() -> list[CheckMessage]:
    """Return the problems of entries with the registered tasks: unknown tasks (E032), a
    settings entry named like a task declared with ``cron`` (E033), a payload the task's
    ``validate_payload`` refuses (E035)."""
    from ..conf import user_settings
    from ..exceptions import PayloadValidationError, UnknownTaskError
    from ..registry import get_task, registered_tasks

    # Read as given: other keys of OUTBOX may be invalid (their own checks say so), which
    # get_settings() would refuse.
    user = user_settings()
    if not isinstance(user, dict) or not isinstance(user.get("CRON", {}), dict):
        return []
    if setting_errors(user):
        return []
    errors: list[CheckMessage] = []
    cron_tasks = [task for task in registered_tasks() if task.cron is not None]
    declared = {task.name for task in cron_tasks}
    for task in cron_tasks:
        try:
            task.check_payload(None)
        except PayloadValidationError as error:
            errors.append(
                Error(
                    f"@task(cron=...) of {task.name}: its jobs have no payload, and {error}",
                    hint="Declare the schedule in OUTBOX['CRON'] with a PAYLOAD the task "
                    "accepts, or let validate_payload accept None.",
                    id="django_outbox.E035",
                )
            )
    for name, options in user.get("CRON", {}).items():
        where = f"OUTBOX['CRON'][{brief(name)}]"
        if name in declared:
            errors.append(
                Error(
                    f"{where} has the name of the task {name!r}, which declares a cron schedule "
                    "of its own (@task(cron=...)).",
                    hint="Give the entry another name, or drop one of the two schedules. Until "
                    "then workers run the settings' entry only.",
                    id="django_outbox.E033",
                )
            )
        try:
            task = get_task(options["TASK"])
        except UnknownTaskError:
            errors.append(
                Error(
                    f"{where}['TASK'] names {options['TASK']!r}, which no installed app registers.",
                    hint="Use a task's registered name (its dotted path, or @task(name=...)); "
                    "django-outbox imports the tasks.py module of every installed app.",
                    id="django_outbox.E032",
                )
            )
            continue
        try:
            task.check_payload(options.get("PAYLOAD"))
        except PayloadValidationError as error:
            errors.append(
                Error(
                    f"{where}['PAYLOAD']: {error}",
                    hint="Every tick's job would be refused: fix the payload.",
                    id="django_outbox.E035",
                )
            )
    return errors
