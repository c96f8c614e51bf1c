"""What the queue is doing, in numbers computed by the database (yoltq's stats).

``queue_stats()`` counts jobs by queue and status; ``processing_time_stats()`` describes how long
recent successful jobs ran; ``retry_stats()`` how many recent jobs needed more than one attempt.
The windowed ones read finished jobs along ``outbox_job_finished`` (status, finished_at), so they
cost what the window holds, not what the table retains.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import connections
from django.db.models import Count, Q
from django.utils import timezone

from .conf import get_settings
from .models import FINISHED, Job, JobStatus

#: The percentiles ``processing_time_stats`` reports.
PERCENTILES = (50, 90, 95, 99)


def _jobs(using: str | None) -> Any:
    return Job.objects.using(using or get_settings().database)


def _window_start(age: datetime.timedelta | float) -> datetime.datetime:
    seconds = age.total_seconds() if isinstance(age, datetime.timedelta) else float(age)
    if not seconds > 0:
        raise ValueError(f"age must be a positive number of seconds or a timedelta, not {age!r}.")
    return timezone.now() - datetime.timedelta(seconds=seconds)


def queue_stats(*, using: str | None = None) -> dict[str, dict[str, int]]:
    """Return ``{queue: {status: count}}`` for every queue with jobs; every status is listed."""
    rows = _jobs(using).order_by().values_list("queue", "status").annotate(count=Count("pk"))
    stats: dict[str, dict[str, int]] = {}
    for queue, status, count in rows:
        stats.setdefault(queue, dict.fromkeys(JobStatus.values, 0))[status] = count
    return dict(sorted(stats.items()))


def processing_time_stats(
    *, age: datetime.timedelta | float = 3600, queue: str | None = None, using: str | None = None
) -> dict[str, float | int | None]:
    """Describe how long the jobs that succeeded in the last ``age`` (seconds or a timedelta)
    ran, from claim to success, in seconds: ``count``, ``avg``, ``min``, ``max`` and ``p50``,
    ``p90``, ``p95``, ``p99`` (None when no job succeeded)."""
    jobs = _jobs(using).filter(
        status=JobStatus.SUCCEEDED, finished_at__gte=_window_start(age), started_at__isnull=False
    )
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    connection = connections[jobs.db]
    table = Job._meta.db_table
    where, params = _where(jobs)
    if connection.vendor == "postgresql":
        sql = f"""
            SELECT count(*), avg(duration), min(duration), max(duration),
                   percentile_cont(ARRAY[{", ".join(str(p / 100) for p in PERCENTILES)}])
                       WITHIN GROUP (ORDER BY duration)
            FROM (SELECT EXTRACT(EPOCH FROM finished_at - started_at)::float AS duration
                  FROM {table} WHERE {where}) AS durations
        """
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            count, average, shortest, longest, percentiles = cursor.fetchone()
    else:
        # SQLite has no percentile function: count, then read each percentile's row (the
        # nearest rank) in the database's order.
        duration = "(julianday(finished_at) - julianday(started_at)) * 86400.0"
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), avg({duration}), min({duration}), max({duration}) "
                f"FROM {table} WHERE {where}",
                params,
            )
            count, average, shortest, longest = cursor.fetchone()
            percentiles = []
            for percentile in PERCENTILES if count else ():
                rank = max(0, -(-percentile * count // 100) - 1)
                cursor.execute(
                    f"SELECT {duration} AS duration FROM {table} WHERE {where} "
                    "ORDER BY duration LIMIT 1 OFFSET %s",
                    [*params, rank],
                )
                percentiles.append(cursor.fetchone()[0])
    stats: dict[str, float | int | None] = {
        "count": int(count),
        "avg": average,
        "min": shortest,
        "max": longest,
    }
    for percentile, value in zip(
        PERCENTILES, percentiles or [None] * len(PERCENTILES), strict=True
    ):
        stats[f"p{percentile}"] = value
    return stats


def retry_stats(
    *, age: datetime.timedelta | float = 86400, using: str | None = None
) -> dict[str, dict[str, float | int]]:
    """For the jobs that finished in the last ``age``, per queue: ``finished``, ``ok`` (succeeded
    at the first attempt), ``retried`` (took more than one), ``retry_percent``."""
    rows = (
        _jobs(using)
        .filter(status__in=FINISHED, finished_at__gte=_window_start(age))
        .order_by()
        .values("queue")
        .annotate(
            finished=Count("pk"),
            ok=Count("pk", filter=Q(status=JobStatus.SUCCEEDED, attempts__lte=1)),
            retried=Count("pk", filter=Q(attempts__gt=1)),
        )
    )
    stats: dict[str, dict[str, float | int]] = {}
    for row in rows:
        finished = row["finished"]
        stats[row["queue"]] = {
            "finished": finished,
            "ok": row["ok"],
            "retried": row["retried"],
            "retry_percent": round(100 * row["retried"] / finished, 2) if finished else 0.0,
        }
    return dict(sorted(stats.items()))


def _where(jobs: Any) -> tuple[str, list[Any]]:
    """The WHERE clause of ``jobs``' query, and its parameters, for raw SQL around it."""
    compiler = jobs.query.get_compiler(using=jobs.db)
    where, params = compiler.compile(jobs.query.where)
    return where, list(params)
