"""Periodic tasks: cron entries that workers enqueue once per tick (``docs/cron.md``).

Declare them with ``@task(cron="*/5 * * * *")`` or in ``OUTBOX["CRON"]``; every worker runs a
scheduler thread, and the database lets one job per tick through (``scheduler``). ``schedule()``
lists the entries with their next and last runs; ``current_tick()`` tells a handler which tick
its job is for.
"""

from __future__ import annotations

import datetime

from ..claimed import current_job
from ..conf import get_settings
from .entries import CronEntry, declared_entries
from .expressions import CronExpression, CronExpressionError
from .introspection import CronStatus, schedule
from .scheduler import tick_of

__all__ = [
    "CronEntry",
    "CronExpression",
    "CronExpressionError",
    "CronStatus",
    "current_tick",
    "declared_entries",
    "schedule",
]


def current_tick() -> datetime.datetime | None:
    """Return the tick (UTC) the running job was enqueued for; None if not a cron job's.

    For handlers that must do their work once per tick, whatever the retries: key an
    external write on it. One query. Raise LookupError outside a handler (``current_job``).
    """
    from ..models import Job

    job = current_job()
    key = (
        Job.objects.using(get_settings().database)
        .filter(pk=job.id)
        .values_list("unique_key", flat=True)
        .first()
    )
    return tick_of(key)
