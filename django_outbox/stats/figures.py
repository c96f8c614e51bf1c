"""What the queue is doing, in numbers computed by the database.

``queue_stats()`` counts jobs by queue and status; ``processing_time_stats()`` describes how long
recent successful jobs ran; ``retry_stats()`` how many recent jobs needed more than one attempt.
Every figure reads jobs of one status at a time along a partial index (``outbox_job_finished``
(status, finished_at) for finished ones); over more than ``EXACT_LIMIT`` finished jobs it reads a
sample instead (``stats_rows``), so that it costs about the same at a million jobs as at ten
thousand, and says so (``estimated``).
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from django.db import connections
from django.utils import timezone

from ..conf import get_settings
from ..db import reports_for
from ..db.partial_indexes import index_condition
from ..models import CLAIMABLE, FINISHED, Job, JobStatus
from .sampling import rows_of

#: The percentiles ``processing_time_stats`` reports.
PERCENTILES = (50, 90, 95, 99)


def _jobs(using: str | None) -> Any:
    return Job.objects.using(using or get_settings().database)


def _window_start(age: datetime.timedelta | float) -> datetime.datetime:
    seconds = age.total_seconds() if isinstance(age, datetime.timedelta) else float(age)
    if not seconds > 0:
        raise ValueError(f"age must be a positive number of seconds or a timedelta, not {age!r}.")
    return timezone.now() - datetime.timedelta(seconds=seconds)


class QueueStats(dict[str, dict[str, int]]):
    """``{queue: {status: count}}``; ``estimated``: the statuses whose counts are estimates."""

    estimated: frozenset[str] = frozenset()


def _status_rows(jobs: Any, status: str) -> list[tuple[Any, str]]:
    """The jobs of ``status``, as (queryset, the condition of the partial index that holds
    them): ready and retrying jobs are in the claim indexes, fair, limited and other jobs
    apart."""
    of_status = jobs.filter(status=status)
    if status in CLAIMABLE:
        unlimited = of_status.filter(limit_key__isnull=True)
        return [
            *(
                (
                    unlimited.filter(fair_key__isnull=not fair),
                    index_condition(CLAIMABLE, fair=fair, limited=False),
                )
                for fair in (False, True)
            ),
            (
                of_status.filter(limit_key__isnull=False),
                index_condition(CLAIMABLE, limited=True),
            ),
        ]
    if status in FINISHED:
        return [(of_status, index_condition(FINISHED))]
    # outbox_job_lease holds the running jobs, outbox_job_halted the halted ones.
    return [(of_status, index_condition([status]))]


def queue_stats(*, using: str | None = None, exact: bool = False) -> QueueStats:
    """Return ``{queue: {status: count}}`` for every queue with jobs; every status is listed.

    Unfinished jobs are counted exactly. A finished status with more than ``EXACT_LIMIT`` jobs
    is estimated from a sample (its name is in the result's ``estimated``); ``exact=True``
    counts every job, at the cost of reading them all.
    """
    jobs = _jobs(using)
    counts: dict[tuple[str, str], float] = {}
    estimated: set[str] = set()
    for status in JobStatus.values:
        for of_status, index in _status_rows(jobs, status):
            # Unfinished jobs have no finished_at to sample along: always counted.
            rows = rows_of(of_status, "queue", index=index, exact=exact or status not in FINISHED)
            if rows.sampled:
                estimated.add(status)
            by_queue = _fetch(
                of_status.db,
                f"SELECT queue, count(*) FROM ({rows.sql}) AS r GROUP BY queue",
                rows.params,
            )
            scale = rows.scale(sum(count for _queue, count in by_queue))
            for queue, count in by_queue:
                counts[queue, status] = counts.get((queue, status), 0) + count * scale
    stats = QueueStats()
    for (queue, status), count in sorted(counts.items()):
        stats.setdefault(queue, dict.fromkeys(JobStatus.values, 0))[status] = round(count)
    stats.estimated = frozenset(estimated)
    return stats


def _fetch(using: str, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        # MariaDB's sum() of integers is a DECIMAL: figures are ints and floats everywhere.
        return [
            tuple(int(value) if isinstance(value, Decimal) else value for value in row)
            for row in cursor.fetchall()
        ]


def processing_time_stats(
    *,
    age: datetime.timedelta | float = 3600,
    queue: str | None = None,
    using: str | None = None,
    exact: bool = False,
) -> dict[str, float | int | bool | None]:
    """Describe how long the jobs that succeeded in the last ``age`` (seconds or a timedelta)
    ran, from claim to success, in seconds: ``count``, ``avg``, ``min``, ``max`` and ``p50``,
    ``p90``, ``p95``, ``p99`` (None when no job succeeded).

    Over more than ``EXACT_LIMIT`` jobs (and not ``exact``), ``estimated`` is True: ``count``
    is an estimate and the rest describe a sample of ``sample`` jobs spread over the window.
    """
    since = _window_start(age)
    # No filter on started_at (it would cost SQLite its covering index for the count): a row
    # without one (written by other code) has no duration, which the aggregates leave out.
    jobs = _jobs(using).filter(status=JobStatus.SUCCEEDED)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    connection = connections[jobs.db]
    reports = reports_for(connection)
    duration = reports.seconds_between("started_at", "finished_at")
    rows = rows_of(
        jobs,
        f"{duration} AS duration",
        index=index_condition(FINISHED),
        since=since,
        exact=exact,
    )
    source = f"({rows.sql}) AS durations"
    with connection.cursor() as cursor:
        durations = reports.durations(cursor, source, rows.params, PERCENTILES)
    count = durations.count
    stats: dict[str, float | int | bool | None] = {
        "count": round(count * rows.scale(count)),
        "avg": durations.average,
        "min": durations.shortest,
        "max": durations.longest,
    }
    values: list[float | None] = [*durations.percentiles] or [None] * len(PERCENTILES)
    for percentile, value in zip(PERCENTILES, values, strict=True):
        stats[f"p{percentile}"] = value
    stats["sample"] = int(count)
    stats["estimated"] = rows.sampled
    return stats


def retry_stats(
    *, age: datetime.timedelta | float = 86400, using: str | None = None, exact: bool = False
) -> dict[str, dict[str, float | int | bool]]:
    """For the jobs that finished in the last ``age``, per queue: ``finished``, ``ok`` (succeeded
    at the first attempt), ``retried`` (took more than one), ``retry_percent``.

    A status with more than ``EXACT_LIMIT`` jobs in the window (and not ``exact``) is
    estimated from a sample: its queues' figures have ``estimated`` True.
    """
    since = _window_start(age)
    totals: dict[str, dict[str, float]] = {}
    estimated: set[str] = set()
    jobs = _jobs(using)
    for status in FINISHED:
        of_status = jobs.filter(status=status)
        rows = rows_of(
            of_status, "queue, attempts", index=index_condition(FINISHED), since=since, exact=exact
        )
        first_attempt = "1" if status == JobStatus.SUCCEEDED else "0"
        by_queue = _fetch(
            of_status.db,
            "SELECT queue, count(*), "
            f"sum(CASE WHEN attempts <= 1 THEN {first_attempt} ELSE 0 END), "
            "sum(CASE WHEN attempts > 1 THEN 1 ELSE 0 END) "
            f"FROM ({rows.sql}) AS r GROUP BY queue",
            rows.params,
        )
        scale = rows.scale(sum(row[1] for row in by_queue))
        for queue, finished, ok, retried in by_queue:
            figures = totals.setdefault(queue, {"finished": 0, "ok": 0, "retried": 0})
            figures["finished"] += finished * scale
            figures["ok"] += ok * scale
            figures["retried"] += retried * scale
            if rows.sampled:
                estimated.add(queue)
    stats: dict[str, dict[str, float | int | bool]] = {}
    for queue, figures in sorted(totals.items()):
        finished, retried = round(figures["finished"]), round(figures["retried"])
        stats[queue] = {
            "finished": finished,
            "ok": round(figures["ok"]),
            "retried": retried,
            "retry_percent": round(100 * retried / finished, 2) if finished else 0.0,
            "estimated": queue in estimated,
        }
    return stats
