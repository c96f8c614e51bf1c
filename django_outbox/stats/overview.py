"""What the admin's dashboard shows: per queue and per task, the jobs failed, due, scheduled,
running and halted; per queue the age of the oldest due job, the attempts workers finished and
failed over the last hour and day; and the workers.

No query reads succeeded or cancelled jobs: the waiting ones are read along the claim's partial
indexes, running ones along ``outbox_job_lease``, halted ones along ``outbox_job_halted``,
failed ones along the failed jobs' own partial indexes (by queue, by task); the charts come from
``QueueActivity``, which workers write at their heartbeats (a row per queue and minute). So its
cost is the backlog's and the failed jobs', however many finished jobs are kept:
docs/performance.md ("The dashboard") has the figures at 1,000,000 finished jobs.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import CharField, Count, DateTimeField, F, Min, Q, QuerySet, Value
from django.db.models.functions import Now
from django.utils import timezone

from ..conf import get_settings
from ..db import reports_for
from ..models import CLAIMABLE, Job, JobStatus, QueueActivity
from ..worker.registration import Registered, registered_workers

#: The dashboard's counts, in its columns' order: jobs that failed for good; ready or retrying
#: jobs whose time has come (due) and whose time has not (scheduled: delayed, or retrying
#: later); running; halted.
COUNTS = ("failed", "due", "scheduled", "running", "halted")


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
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    #: Seconds the longest-waiting due job (ready or retrying) has waited; None: none is due.
    oldest_due_age: float | None = None
    activity: dict[str, Activity] = field(default_factory=dict)


@dataclass
class TaskSummary:
    name: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))


@dataclass
class Dashboard:
    now: datetime.datetime
    queues: list[QueueSummary]
    workers: list[Registered]
    tasks: list[TaskSummary] = field(default_factory=list)

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

    tasks: dict[str, TaskSummary] = {}
    for queue_name, task_name, status, count, due, oldest_due in _counts(using):
        if status in (JobStatus.READY, JobStatus.RETRYING):
            counted = {"due": due, "scheduled": count - due}
        else:
            counted = {str(status): count}
        # The failed jobs are counted twice, by queue and by task: each row names one of them.
        summaries: list[QueueSummary | TaskSummary] = []
        if queue_name is not None:
            summaries.append(queue(queue_name))
        if task_name is not None:
            summaries.append(tasks.setdefault(task_name, TaskSummary(task_name)))
        for summary in summaries:
            for key, value in counted.items():
                summary.counts[key] += value
        if oldest_due is not None and queue_name is not None:
            summary = queue(queue_name)
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
        tasks=sorted(tasks.values(), key=lambda summary: summary.name),
    )


def _counts(
    using: str,
) -> list[tuple[str | None, str | None, str, int, int, datetime.datetime | None]]:
    """(queue, task, status, jobs, of them due, oldest due run_at), in one query.

    The jobs not finished are counted by queue and task together; the failed ones twice, by
    queue (task None) and by task (queue None), each along its partial index. Each arm's filter
    is the condition of the partial index it reads, so that the planner may use it: the claim's
    three (waiting jobs without a key, with a fair key, under a limit), the lease index
    (running), the halted one, and the failed jobs' by queue and by task.
    """
    jobs = Job.objects.using(using).order_by()
    nothing = Value(None, output_field=CharField())

    def grouped(
        subset: QuerySet[Job], *, queue: Any, task: Any, waiting: bool, status: Any = None
    ) -> QuerySet[Any]:
        due = Q(run_at__lte=Now())
        return (
            subset.annotate(
                counted_queue=queue, counted_task=task, counted_status=status or F("status")
            )
            .values_list("counted_queue", "counted_task", "counted_status")
            .annotate(
                count=Count("pk"),
                due=Count("pk", filter=due) if waiting else Value(0),
                oldest_due=(
                    Min("run_at", filter=due)
                    if waiting
                    else Value(None, output_field=DateTimeField())
                ),
            )
        )

    by_both = {"queue": F("queue"), "task": F("task_name")}
    waiting = grouped(
        jobs.filter(status__in=CLAIMABLE, fair_key__isnull=True, limit_key__isnull=True),
        **by_both,
        waiting=True,
    )
    fair = grouped(
        jobs.filter(status__in=CLAIMABLE, fair_key__isnull=False, limit_key__isnull=True),
        **by_both,
        waiting=True,
    )
    limited = grouped(
        jobs.filter(status__in=CLAIMABLE, limit_key__isnull=False), **by_both, waiting=True
    )
    running = grouped(jobs.filter(status=JobStatus.RUNNING), **by_both, waiting=False)
    halted = grouped(jobs.filter(status=JobStatus.HALTED), **by_both, waiting=False)
    # The status a constant, not the column: then the failed jobs' indexes (queue or task, ...)
    # hold every column read, and are read alone (an index-only scan on PostgreSQL), not the
    # failed rows scattered through the table.
    failed = jobs.filter(status=JobStatus.FAILED)
    failed_status = Value(JobStatus.FAILED.value, output_field=CharField())
    failed_by_queue = grouped(
        failed, queue=F("queue"), task=nothing, waiting=False, status=failed_status
    )
    failed_by_task = grouped(
        failed, queue=nothing, task=F("task_name"), waiting=False, status=failed_status
    )
    return list(
        waiting.union(
            fair, limited, running, halted, failed_by_queue, failed_by_task, all=True
        ).order_by()
    )


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
