"""What the admin's dashboard shows: per queue, the jobs waiting and running, the age of the
oldest due job, the attempts workers finished and failed over the last hour and day; and the
workers.

No query reads finished jobs: the waiting ones are read along the claim's partial indexes,
running ones along ``outbox_job_lease``, halted ones along ``outbox_job_halted``; the charts
come from ``QueueActivity``, which workers write at their heartbeats (a row per queue and
minute). So its cost is the backlog's, however many finished jobs are kept:
docs/performance.md ("The dashboard") has the figures at 1,000,000 finished jobs.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import Count, DateTimeField, Min, Q, QuerySet, Value
from django.db.models.functions import Now
from django.utils import timezone

from ..conf import get_settings
from ..db import reports_for
from ..models import CLAIMABLE, Job, JobStatus, QueueActivity
from ..worker.registration import Registered, registered_workers

#: The statuses of jobs not finished, as the dashboard's columns show them.
DEPTH_STATUSES = (JobStatus.READY, JobStatus.RETRYING, JobStatus.RUNNING, JobStatus.HALTED)


@dataclass(frozen=True)
class Window:
    """A chart's span, cut into equal buckets."""

    name: str
    seconds: int
    buckets: int

    @property
    def bucket_seconds(self) -> int:
        return self.seconds // self.buckets


HOUR = Window("hour", 3600, 60)
DAY = Window("day", 86400, 96)


@dataclass
class Activity:
    """Attempts workers finished in each bucket of a window (oldest first), by outcome."""

    window: Window
    #: The first bucket's start.
    start: datetime.datetime
    succeeded: list[int]
    retried: list[int]
    failed: list[int]

    @property
    def attempts(self) -> int:
        return sum(self.succeeded) + sum(self.retried) + sum(self.failed)

    @property
    def failure_rate(self) -> float | None:
        """Attempts that failed (to be retried, or for good), of all; None without any."""
        attempts = self.attempts
        return (sum(self.retried) + sum(self.failed)) / attempts if attempts else None

    @property
    def per_minute(self) -> float:
        return self.attempts * 60 / self.window.seconds


@dataclass
class QueueSummary:
    name: str
    depth: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DEPTH_STATUSES, 0))
    #: Seconds the longest-waiting due job (ready or retrying) has waited; None: none is due.
    oldest_due_age: float | None = None
    activity: dict[str, Activity] = field(default_factory=dict)


@dataclass
class Dashboard:
    now: datetime.datetime
    queues: list[QueueSummary]
    workers: list[Registered]

    @property
    def live_workers(self) -> list[Registered]:
        return [worker for worker in self.workers if not worker.stale]

    @property
    def stale_workers(self) -> list[Registered]:
        return [worker for worker in self.workers if worker.stale]


def dashboard(*, using: str | None = None) -> Dashboard:
    """Gather what the dashboard shows, from ``using`` (default ``OUTBOX["DATABASE"]``)."""
    using = using or get_settings().database
    now = timezone.now()
    queues: dict[str, QueueSummary] = {}

    def queue(name: str) -> QueueSummary:
        if name not in queues:
            queues[name] = QueueSummary(name)
        return queues[name]

    for name, status, count, oldest_due in _depth(using):
        summary = queue(name)
        summary.depth[status] += count
        if oldest_due is not None:
            age = max(0.0, (now - oldest_due).total_seconds())
            summary.oldest_due_age = max(summary.oldest_due_age or 0.0, age)
    for window in (HOUR, DAY):
        for name, activity in _activity(using, window, now).items():
            queue(name).activity[window.name] = activity
    for summary in queues.values():
        for window in (HOUR, DAY):
            summary.activity.setdefault(window.name, _empty(window, now))
    return Dashboard(
        now=now,
        queues=sorted(queues.values(), key=lambda summary: summary.name),
        workers=registered_workers(using=using),
    )


def _depth(using: str) -> list[tuple[str, str, int, datetime.datetime | None]]:
    """(queue, status, jobs, oldest due run_at) of the jobs not finished, in one query.

    Each arm's filter is the condition of the partial index it reads, so that the planner may
    use it: the claim's two (waiting jobs without and with a fair key), the lease index
    (running) and the halted one.
    """
    jobs = Job.objects.using(using).order_by()

    def grouped(subset: QuerySet[Job], due: bool) -> QuerySet[Any]:
        oldest_due = (
            Min("run_at", filter=Q(run_at__lte=Now()))
            if due
            else Value(None, output_field=DateTimeField())
        )
        return subset.values_list("queue", "status").annotate(
            count=Count("pk"), oldest_due=oldest_due
        )

    waiting = grouped(jobs.filter(status__in=CLAIMABLE, fair_key__isnull=True), due=True)
    fair = grouped(jobs.filter(status__in=CLAIMABLE, fair_key__isnull=False), due=True)
    running = grouped(jobs.filter(status=JobStatus.RUNNING), due=False)
    halted = grouped(jobs.filter(status=JobStatus.HALTED), due=False)
    return list(waiting.union(fair, running, halted, all=True).order_by())


def _activity(using: str, window: Window, now: datetime.datetime) -> dict[str, Activity]:
    """What workers finished within ``window`` up to ``now``, per queue, by bucket.

    Reads ``QueueActivity`` (a row per queue and minute), along its (minute, queue) index: the
    same cost however many jobs ran or are kept.
    """
    start = _window_start(window, now)
    connection = connections[using]
    rows = QueueActivity.objects.using(using).filter(minute__gte=start)
    where, where_params = rows.query.get_compiler(using=using).compile(rows.query.where)
    bucket = reports_for(connection).minute_bucket("minute")
    sql = (
        f"SELECT queue, {bucket} AS bucket, SUM(succeeded), "
        f"SUM(retried), SUM(failed) FROM {QueueActivity._meta.db_table} WHERE {where} "
        "GROUP BY queue, bucket"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [start.timestamp(), window.bucket_seconds, *where_params])
        found = cursor.fetchall()
    activity: dict[str, Activity] = {}
    for name, index, succeeded, retried, failed in found:
        # A minute counted by a worker whose clock is ahead goes in the last bucket.
        index = min(max(int(index), 0), window.buckets - 1)
        if name not in activity:
            activity[name] = _empty(window, now)
        series = activity[name]
        series.succeeded[index] += int(succeeded)
        series.retried[index] += int(retried)
        series.failed[index] += int(failed)
    return activity


def _window_start(window: Window, now: datetime.datetime) -> datetime.datetime:
    """The start of the window's first bucket: its last bucket is the one ``now`` is in."""
    size = window.bucket_seconds
    current = int(now.timestamp() // size) * size
    first = current - (window.buckets - 1) * size
    return datetime.datetime.fromtimestamp(first, tz=datetime.timezone.utc)


def _empty(window: Window, now: datetime.datetime) -> Activity:
    return Activity(
        window=window,
        start=_window_start(window, now),
        succeeded=[0] * window.buckets,
        retried=[0] * window.buckets,
        failed=[0] * window.buckets,
    )
