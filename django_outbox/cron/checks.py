"""System checks of cron entries beyond their fields' forms (``validation.schedules``).

``payload_errors`` says whether each entry's PAYLOAD is JSON; ``entry_errors`` needs the
registered tasks, so it runs with the other system checks, after every app's tasks module was
imported.
"""

from __future__ import annotations

from django.core.checks import CheckMessage, Error

from ..conf import user_settings
from ..exceptions import PayloadError, PayloadValidationError, UnknownTaskError
from ..serialization import encode
from ..tasks.registry import get_task, registered_tasks
from ..validation.schedules import cron_setting_errors
from ..validation.text import brief


def payload_errors(user: object) -> list[CheckMessage]:
    """Return the errors of entries of ``OUTBOX["CRON"]`` whose PAYLOAD is not JSON (E035)."""
    entries = user.get("CRON") if isinstance(user, dict) else None
    if not isinstance(entries, dict):
        return []
    errors: list[CheckMessage] = []
    for name, options in entries.items():
        if not isinstance(options, dict) or "PAYLOAD" not in options:
            continue
        where = f"OUTBOX['CRON'][{brief(name)}]"
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


def entry_errors() -> list[CheckMessage]:
    """Return the problems of entries with the registered tasks: unknown tasks (E032), a
    settings entry named like a task declared with ``cron`` (E033), a payload the task's
    ``validate_payload`` refuses (E035)."""
    # Read as given: other keys of OUTBOX may be invalid (their own checks say so), which
    # get_settings() would refuse.
    user = user_settings()
    if not isinstance(user, dict) or not isinstance(user.get("CRON", {}), dict):
        return []
    if cron_setting_errors(user):
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
