"""What the cron entries are and did, for ``manage.py outbox_cron`` and the dashboard."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..conf import get_settings
from ..exceptions import UnknownTaskError
from ..tasks.registry import get_task
from .entries import CronEntry, declared_entries
from .scheduler import loaded, utc_now

if TYPE_CHECKING:
    from ..models import CronState


@dataclass(frozen=True)
class CronStatus:
    """One cron entry: its declaration, its next tick, and the last tick a worker enqueued."""

    name: str
    task: str
    expression: str
    timezone: str
    #: The expression in English ("At 03:00"), by cronsim.
    description: str
    #: "task" (``@task(cron=...)``) or "settings" (``OUTBOX["CRON"]``).
    source: str
    queue: str | None
    #: The next tick after now, in UTC (None if the expression names no more).
    next_run: datetime.datetime | None
    #: When a worker first saw this schedule (None: no worker has yet).
    since: datetime.datetime | None
    #: The last tick enqueued, when, and its job (None: none yet).
    last_run: datetime.datetime | None
    last_enqueued_at: datetime.datetime | None
    last_job_id: int | None
    #: The last job's status; None if there is none or it was pruned.
    last_job_status: str | None

    def as_dict(self) -> dict[str, Any]:
        """Return the fields as JSON types (datetimes as ISO 8601 text)."""
        return {
            key: value.isoformat() if isinstance(value, datetime.datetime) else value
            for key, value in self.__dict__.items()
        }


def schedule(*, now: datetime.datetime | None = None, using: str | None = None) -> list[CronStatus]:
    """Return every declared cron entry with its next and last run, by name (two queries)."""
    from ..models import CronState, Job

    using = using or get_settings().database
    now = now or utc_now()
    entries = declared_entries()
    states = {
        state.name: state
        for state in CronState.objects.using(using).filter(
            name__in=[entry.name for entry in entries]
        )
    }
    job_ids = [state.last_job_id for state in states.values() if state.last_job_id is not None]
    statuses = dict(
        Job.objects.using(using).filter(pk__in=job_ids).values_list("pk", "status")
        if job_ids
        else []
    )
    return [_status(entry, states.get(entry.name), statuses, now) for entry in entries]


def _status(
    entry: CronEntry, state: CronState | None, statuses: dict[int, str], now: datetime.datetime
) -> CronStatus:
    job_id = state.last_job_id if state is not None else None
    return CronStatus(
        name=entry.name,
        task=entry.task_name,
        expression=entry.expression.text,
        timezone=entry.expression.zone_name,
        description=entry.expression.describe(),
        source=entry.source,
        queue=entry.queue or _task_queue(entry.task_name),
        next_run=entry.expression.following(now),
        since=loaded(state.since) if state is not None else None,
        last_run=loaded(state.last_tick) if state is not None else None,
        last_enqueued_at=loaded(state.last_enqueued_at) if state is not None else None,
        last_job_id=job_id,
        last_job_status=statuses.get(job_id) if job_id is not None else None,
    )


def _task_queue(task_name: str) -> str | None:
    try:
        return get_task(task_name).queue
    except UnknownTaskError:
        return None
