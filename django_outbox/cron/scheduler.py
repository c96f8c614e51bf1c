"""Enqueueing cron entries' ticks, once each however many workers run.

Every worker (unless started with ``--no-cron`` or ``--burst``) runs a ``CronScheduler`` thread
when the code declares entries. At each pass it reads the entries' rows (``CronState``) and,
for each entry whose latest tick is newer than its last enqueued one, moves ``last_tick`` to
that tick with a conditional UPDATE and enqueues the job in the same transaction: workers that
race for the tick find no row to update and enqueue nothing, and a worker that crashes
between the two writes leaves neither. See ``CronState``.

Missed ticks are not caught up: a worker that finds several ticks passed since the last one
(no worker ran, or all were busy failing) enqueues the latest only, late. A new entry (or an
entry whose expression or zone changed) starts at the first tick after a worker first saw it.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Q
from django.utils import timezone

from ..db import retry_while_locked, write_transaction
from ..db.outage import ErrorBackoff
from ..tasks.enqueue import enqueue
from .entries import CronEntry
from .expressions import UTC

if TYPE_CHECKING:
    from ..models import CronState, Job

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime.datetime]
#: The longest sleep between passes: a clock stepped forward is noticed within it.
MAX_SLEEP = 300.0
#: Wake this long after a tick, so that the clock reads the tick's minute.
AFTER_TICK = 0.05
#: The prefix of a cron job's unique_key: ``cron:<entry name>:<tick, UTC, ISO 8601>``.
KEY_PREFIX = "cron:"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(UTC)


def tick_key(name: str, tick: datetime.datetime) -> str:
    """Return the unique_key of the job of ``name``'s ``tick``."""
    return f"{KEY_PREFIX}{name}:{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def tick_of(unique_key: str | None) -> datetime.datetime | None:
    """Return the tick a cron job's unique_key names, or None for another key."""
    if not unique_key or not unique_key.startswith(KEY_PREFIX):
        return None
    try:
        # The tick is the key's last 20 characters: a name may hold colons too.
        return datetime.datetime.strptime(unique_key[-20:], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=UTC
        )
    except ValueError:
        return None


def stored(moment: datetime.datetime) -> datetime.datetime:
    """Return an aware ``moment`` as a DateTimeField takes it (naive local without USE_TZ)."""
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def loaded(moment: datetime.datetime | None) -> datetime.datetime | None:
    """Return a DateTimeField's value as an aware datetime in UTC."""
    if moment is None:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment.astimezone(UTC)


def _model() -> type[CronState]:
    # The model is imported on use: a project's tasks module may import this package, and its
    # models.py may import the tasks module before the app registry is ready.
    from ..models import CronState

    return CronState


def enqueue_due(entries: Sequence[CronEntry], *, now: datetime.datetime, using: str) -> list[Job]:
    """Enqueue the latest tick at or before ``now`` of each entry, unless it already was.

    Return the jobs this call enqueued. A database error is raised (the caller backs off); an
    entry whose enqueue fails otherwise (its task unknown to this deploy, a full queue, a
    payload its task refuses) is logged and its tick is left for the next pass.
    """
    model = _model()
    rows = {
        state.name: state
        for state in model.objects.using(using).filter(name__in=[entry.name for entry in entries])
    }
    jobs = []
    for entry in entries:
        state = rows.get(entry.name)
        if state is None or state.schedule != entry.schedule:
            _start(entry, state, now, using)
            continue
        tick = entry.expression.latest(now)
        since = loaded(state.since)
        last = loaded(state.last_tick)
        if tick is None or since is None or tick <= since or (last is not None and tick <= last):
            continue
        try:
            job = retry_while_locked(partial(_enqueue_tick, entry, tick, now, using))
        except DatabaseError:
            raise
        except Exception:
            logger.exception(
                "cron entry could not be enqueued name=%s task=%s tick=%s",
                entry.name,
                entry.task_name,
                tick.isoformat(),
            )
            continue
        if job is not None:
            jobs.append(job)
    return jobs


def _start(entry: CronEntry, state: CronState | None, now: datetime.datetime, using: str) -> None:
    """Record a new entry, or an entry's new schedule: its first tick is the next one."""
    model = _model()
    if state is None:
        # Workers starting together insert it once: the others' rows are ignored.
        model.objects.using(using).bulk_create(
            [model(name=entry.name, schedule=entry.schedule, since=stored(now))],
            ignore_conflicts=True,
        )
        logger.info("cron entry added name=%s schedule=%r", entry.name, entry.schedule)
        return
    # Only from the schedule read: of workers racing to change it, one does.
    changed = (
        model.objects.using(using)
        .filter(pk=state.pk, schedule=state.schedule)
        .update(schedule=entry.schedule, since=stored(now))
    )
    if changed:
        logger.info(
            "cron entry schedule changed name=%s from=%r to=%r",
            entry.name,
            state.schedule,
            entry.schedule,
        )


def _enqueue_tick(
    entry: CronEntry, tick: datetime.datetime, now: datetime.datetime, using: str
) -> Job | None:
    """Enqueue ``entry``'s job for ``tick`` if no worker did; return it, or None."""
    model = _model()
    with write_transaction(using):
        # First, so that a racing worker waits here for this transaction and then finds
        # last_tick moved: it writes no job, and sends no job_enqueued signal.
        moved = (
            model.objects.using(using)
            .filter(name=entry.name, schedule=entry.schedule, since__lt=stored(tick))
            .filter(Q(last_tick__isnull=True) | Q(last_tick__lt=stored(tick)))
            .update(last_tick=stored(tick), last_enqueued_at=stored(now), last_job_id=None)
        )
        if not moved:
            return None
        job = enqueue(
            entry.task_name,
            entry.payload,
            queue=entry.queue,
            priority=entry.priority,
            unique_key=tick_key(entry.name, tick),
        )
        model.objects.using(using).filter(name=entry.name).update(last_job_id=job.pk)
    late = (now - tick).total_seconds()
    logger.info(
        "cron enqueued name=%s task=%s tick=%s job=%s late=%.1fs",
        entry.name,
        entry.task_name,
        tick.isoformat(),
        job.pk,
        late,
    )
    return job


class CronScheduler:
    """Run ``enqueue_due`` at every tick of ``entries`` until ``done`` is set."""

    def __init__(
        self,
        entries: Sequence[CronEntry],
        *,
        using: str,
        worker_id: str,
        done: threading.Event,
        clock: Clock = utc_now,
        retry_seconds: float = 1.0,
    ) -> None:
        self.entries = list(entries)
        self.using = using
        self.worker_id = worker_id
        self.done = done
        self.clock = clock
        self.retry_seconds = retry_seconds

    def run_once(self) -> list[Job]:
        """Enqueue the ticks due now; return the jobs enqueued."""
        return enqueue_due(self.entries, now=self.clock(), using=self.using)

    def seconds_to_next_tick(self) -> float:
        """Return how long to sleep until the earliest next tick (at most ``MAX_SLEEP``)."""
        now = self.clock()
        ticks = [
            tick for entry in self.entries if (tick := entry.expression.following(now)) is not None
        ]
        if not ticks:
            return MAX_SLEEP
        return min(max((min(ticks) - now).total_seconds(), 0.0) + AFTER_TICK, MAX_SLEEP)

    def run(self) -> None:
        """Pass at once (a tick missed while no worker ran), then at every tick."""
        connection = connections[self.using]
        errors = ErrorBackoff(
            f"enqueueing cron jobs worker={self.worker_id}",
            logger,
            first_delay=self.retry_seconds,
            max_delay=60.0,
        )
        first = True
        try:
            while not self.done.is_set():
                try:
                    self.run_once()
                    if first:
                        first = False
                        logger.info(
                            "cron scheduler running entries=%s worker=%s",
                            ",".join(entry.name for entry in self.entries),
                            self.worker_id,
                        )
                except DatabaseError as exc:
                    connection.close()
                    wait = errors.failed(exc)
                except Exception as exc:
                    # A bug, not an outage: logged the same way, and the worker goes on.
                    wait = errors.failed(exc)
                else:
                    errors.succeeded()
                    wait = self.seconds_to_next_tick()
                self.done.wait(wait)
        finally:
            connection.close()
