"""The cron entries this process declares: ``@task(cron=...)`` and ``OUTBOX["CRON"]``.

A task declared with ``cron`` is an entry named after the task, with no payload. Each item of
``OUTBOX["CRON"]`` is an entry named by its key::

    OUTBOX = {"CRON": {"nightly-cleanup": {"TASK": "myapp.tasks.cleanup",
                                           "SCHEDULE": "0 3 * * *",
                                           "PAYLOAD": {"days": 30}}}}

The system checks (``validation.schedules``, ``cron.checks``) report bad entries;
``declared_entries`` leaves out those it cannot use, so that one bad entry stops none of the
others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..conf import get_settings
from ..tasks.registry import registered_tasks
from .expressions import CronExpression, CronExpressionError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CronEntry:
    """A task enqueued at every tick of a cron expression."""

    name: str
    task_name: str
    expression: CronExpression
    payload: Any = None
    queue: str | None = None
    priority: int | None = None
    #: "task" (``@task(cron=...)``) or "settings" (``OUTBOX["CRON"]``).
    source: str = "settings"

    @property
    def schedule(self) -> str:
        """The expression and its zone as the database records them (``0 3 * * * UTC``):
        another schedule under the same name starts afresh."""
        return f"{self.expression.text} {self.expression.zone_name}"


def task_entries() -> list[CronEntry]:
    """Return the entries of registered tasks declared with ``cron``."""
    zone = get_settings().cron_timezone
    entries = []
    for task in registered_tasks():
        if task.cron is None:
            continue
        try:
            expression = CronExpression(task.cron, zone)
        except CronExpressionError:
            # @task checked the expression; only OUTBOX["CRON_TIMEZONE"] can be wrong here,
            # which the system checks report.
            continue
        entries.append(CronEntry(task.name, task.name, expression, source="task"))
    return entries


def settings_entries() -> list[CronEntry]:
    """Return the usable entries of ``OUTBOX["CRON"]``."""
    outbox = get_settings()
    entries = []
    for name, options in outbox.cron.items():
        try:
            expression = CronExpression(
                options["SCHEDULE"], options.get("TIMEZONE", outbox.cron_timezone)
            )
        except (CronExpressionError, KeyError, TypeError):
            continue
        entries.append(
            CronEntry(
                name,
                options["TASK"],
                expression,
                payload=options.get("PAYLOAD"),
                queue=options.get("QUEUE"),
                priority=options.get("PRIORITY"),
            )
        )
    return entries


def declared_entries() -> list[CronEntry]:
    """Return every entry, by name; a settings entry named like a task's comes first."""
    entries: dict[str, CronEntry] = {}
    for entry in settings_entries() + task_entries():
        entries.setdefault(entry.name, entry)
    return sorted(entries.values(), key=lambda entry: entry.name)
