"""django_outbox.stats past EXACT_LIMIT: samples along the index, estimates said to be so."""

import datetime
import io
import json
import re

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from django_outbox.db.partial_indexes import index_condition
from django_outbox.models import FINISHED, Job, JobStatus
from django_outbox.stats import sampling as stats_rows
from django_outbox.stats.figures import processing_time_stats, queue_stats, retry_stats
from django_outbox.stats.sampling import rows_of
from tests.bulk_rows import insert_jobs
from tests.db.plans import mariadb_plan

pytestmark = pytest.mark.django_db(transaction=True)

#: Jobs per queue the tests insert: far past the lowered EXACT_LIMIT.
JOBS = 400


@pytest.fixture
def small_limits(monkeypatch):
    """A limit of 50 jobs and samples of 10 slices of 10: a few hundred jobs are "many"."""
    monkeypatch.setattr(stats_rows, "EXACT_LIMIT", 50)
    monkeypatch.setattr(stats_rows, "SLICES", 10)
    monkeypatch.setattr(stats_rows, "PER_SLICE", 10)


def insert_finished(queue, count, *, status=JobStatus.SUCCEEDED, retried_every=0):
    """``count`` jobs of ``queue`` finished over the last 50 minutes, one every few seconds;
    job ``i`` ran ``i % 10 + 1`` seconds; every ``retried_every``-th took two attempts."""
    now = timezone.now()
    jobs = []
    for number in range(count):
        finished_at = now - datetime.timedelta(seconds=3000 * number / count)
        attempts = 2 if retried_every and number % retried_every == 0 else 1
        jobs.append(
            Job(
                task_name="tests.noop",
                queue=queue,
                payload={},
                status=status,
                attempts=attempts,
                max_attempts=3,
                started_at=finished_at - datetime.timedelta(seconds=number % 10 + 1),
                finished_at=finished_at,
            )
        )
    Job.objects.bulk_create(jobs)
    if connection.vendor == "postgresql":
        # The estimate is the planner's: give it statistics, as autovacuum would.
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table}")


def test_queue_stats_estimate_a_large_finished_status_and_say_so(small_limits):
    insert_finished("big", JOBS)
    insert_finished("big", 20, status=JobStatus.FAILED)
    insert_finished("small", 30)
    Job.objects.create(task_name="tests.noop", queue="small", max_attempts=1)
    stats = queue_stats()
    assert stats.estimated == {JobStatus.SUCCEEDED}
    # Both queues' successes come from one sample of 430 jobs, scaled to the estimate.
    assert stats["big"][JobStatus.SUCCEEDED] + stats["small"][JobStatus.SUCCEEDED] == (
        pytest.approx(430, rel=0.3)
    )
    assert stats["big"][JobStatus.SUCCEEDED] == pytest.approx(400, rel=0.3)
    # Under the limit: exact.
    assert stats["big"][JobStatus.FAILED] == 20
    assert stats["small"][JobStatus.READY] == 1
    exact = queue_stats(exact=True)
    assert exact.estimated == frozenset()
    assert exact["big"][JobStatus.SUCCEEDED] == 400
    assert exact["small"][JobStatus.SUCCEEDED] == 30


def test_processing_time_stats_describe_a_sample_past_the_limit(small_limits):
    insert_finished("default", JOBS)
    stats = processing_time_stats()
    assert stats["estimated"] is True
    # 10 slices of at most 10 jobs.
    assert stats["sample"] in range(1, 101)
    assert stats["count"] == pytest.approx(JOBS, rel=0.3)
    # Run times are 1 to 10 s, evenly: the sample's figures are close to the whole's.
    assert stats["min"] == pytest.approx(1, abs=0.01)
    assert stats["max"] == pytest.approx(10, abs=0.01)
    assert stats["avg"] == pytest.approx(5.5, abs=1.0)
    assert stats["p50"] == pytest.approx(5.5, abs=1.5)
    exact = processing_time_stats(exact=True)
    assert exact["estimated"] is False
    assert exact["count"] == exact["sample"] == JOBS
    assert exact["avg"] == pytest.approx(5.5, abs=0.01)


def test_processing_time_stats_stay_exact_up_to_the_limit(small_limits):
    insert_finished("default", 50)
    stats = processing_time_stats()
    assert stats["estimated"] is False
    assert stats["count"] == stats["sample"] == 50


def test_retry_stats_estimate_a_large_status_per_queue(small_limits):
    insert_finished("default", JOBS, retried_every=4)
    insert_finished("default", 10, status=JobStatus.FAILED, retried_every=1)
    stats = retry_stats()["default"]
    assert stats["estimated"] is True
    assert stats["finished"] == pytest.approx(410, rel=0.3)
    # A quarter of the successes, and every failure, took two attempts.
    assert stats["retry_percent"] == pytest.approx(100 * 110 / 410, abs=10)
    exact = retry_stats(exact=True)["default"]
    assert exact == {
        "finished": 410,
        "ok": 300,
        "retried": 110,
        "retry_percent": round(100 * 110 / 410, 2),
        "estimated": False,
    }


@pytest.mark.parametrize("exact", [False, True], ids=["sample", "every-row"])
def test_the_figures_read_finished_jobs_along_their_partial_index(small_limits, exact):
    """SQLite uses a partial index only when the query spells out its condition: without it,
    every figure would scan the table (seconds at a million jobs)."""
    insert_finished("default", JOBS)
    if connection.vendor == "mysql":
        # MariaDB reads a small table whole when most of it matches: make the finished jobs
        # a few among many, as they are beside a backlog.
        insert_jobs(20_000, task_name="tests.testapp.tasks.noop", status=JobStatus.READY)
    rows = rows_of(
        Job.objects.filter(status=JobStatus.SUCCEEDED),
        "queue",
        index=index_condition(FINISHED),
        since=timezone.now() - datetime.timedelta(hours=1),
        exact=exact,
    )
    assert rows.sampled is not exact
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The table is small: forbid the scan to see whether the index can serve.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {rows.sql}", rows.params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan" not in plan
        elif connection.vendor == "mysql":
            plan = mariadb_plan(cursor, rows.sql, rows.params)
            assert "SCAN django_outbox_job" not in plan
            # Any index led by the status serves: MariaDB's hold every status.
            assert re.search(r"outbox_job_(finished|pending|failed_\w+)\b", plan), plan
            return
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {rows.sql}", rows.params)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            assert "SCAN django_outbox_job" not in plan
    assert "outbox_job_finished" in plan


def test_index_condition_refuses_what_is_not_a_status():
    with pytest.raises(ValueError, match="not a job status"):
        index_condition(["succeeded'; DROP TABLE x; --"])


def test_the_command_marks_estimates_and_counts_every_job_with_exact(small_limits):
    insert_finished("default", JOBS)
    out = io.StringIO()
    call_command("outbox_stats", stdout=out)
    text = out.getvalue()
    assert "~: estimated from a sample" in text
    assert "(run times of a sample of" in text
    out = io.StringIO()
    call_command("outbox_stats", "--json", "--exact", stdout=out)
    figures = json.loads(out.getvalue())
    assert figures["estimated_statuses"] == []
    assert figures["queues"]["default"]["succeeded"] == JOBS
    assert figures["processing_time"]["estimated"] is False
    out = io.StringIO()
    call_command("outbox_stats", "--json", stdout=out)
    assert json.loads(out.getvalue())["estimated_statuses"] == ["succeeded"]


def test_a_sample_works_without_use_tz(small_limits, settings):
    settings.USE_TZ = False
    insert_finished("default", JOBS)
    stats = processing_time_stats()
    assert stats["estimated"] is True
    assert stats["count"] == pytest.approx(JOBS, rel=0.3)
    assert queue_stats()["default"][JobStatus.SUCCEEDED] == pytest.approx(JOBS, rel=0.3)
