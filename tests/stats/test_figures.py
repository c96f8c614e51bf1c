"""django_outbox.stats and manage.py outbox_stats: figures the database computes."""

import datetime
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_outbox.models import Job, JobStatus
from django_outbox.stats.figures import processing_time_stats, queue_stats, retry_stats
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def finished(job, *, status=JobStatus.SUCCEEDED, seconds=1.0, attempts=1, ago=60.0):
    """Make ``job`` one that ran ``seconds`` and finished ``ago`` seconds ago."""
    end = timezone.now() - datetime.timedelta(seconds=ago)
    Job.objects.filter(pk=job.pk).update(
        status=status,
        attempts=attempts,
        max_attempts=max(attempts, job.max_attempts),
        started_at=end - datetime.timedelta(seconds=seconds),
        finished_at=end,
    )


def test_queue_stats_counts_jobs_by_queue_and_status():
    tasks.noop.enqueue()
    tasks.noop.enqueue()
    finished(tasks.noop.enqueue())
    tasks.write_note.enqueue({"text": "x"})
    stats = queue_stats()
    assert set(stats) == {"default", "emails"}
    assert stats["default"]["ready"] == 2
    assert stats["default"]["succeeded"] == 1
    assert stats["default"]["failed"] == 0
    assert stats["emails"] == {**dict.fromkeys(JobStatus.values, 0), "ready": 1}


def test_processing_time_stats_describe_recent_successes_only():
    for seconds in range(1, 101):  # 1 to 100 s
        finished(tasks.noop.enqueue(), seconds=float(seconds))
    finished(tasks.noop.enqueue(), seconds=1000.0, ago=7200)  # Outside the hour.
    finished(tasks.noop.enqueue(), seconds=500.0, status=JobStatus.FAILED)
    finished(tasks.write_note.enqueue({"text": "x"}), seconds=3.0)
    stats = processing_time_stats(queue="default")
    assert stats["count"] == 100
    assert stats["min"] == pytest.approx(1, abs=0.01)
    assert stats["max"] == pytest.approx(100, abs=0.01)
    assert stats["avg"] == pytest.approx(50.5, abs=0.01)
    # Nearest rank on SQLite, interpolated on PostgreSQL: within one step.
    assert stats["p50"] == pytest.approx(50.5, abs=0.6)
    assert stats["p90"] == pytest.approx(90.1, abs=0.6)
    assert stats["p99"] == pytest.approx(99.01, abs=0.6)
    assert processing_time_stats(age=datetime.timedelta(hours=3))["count"] == 102


def test_processing_time_stats_without_jobs_are_empty():
    assert processing_time_stats() == {
        "count": 0,
        "avg": None,
        "min": None,
        "max": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
        "sample": 0,
        "estimated": False,
    }
    with pytest.raises(ValueError, match="age must be a positive"):
        processing_time_stats(age=0)


def test_retry_stats_count_first_attempt_successes_and_retried_jobs_per_queue():
    for attempts in (1, 1, 1, 2):
        finished(tasks.noop.enqueue(), attempts=attempts)
    finished(tasks.noop.enqueue(), status=JobStatus.FAILED, attempts=3)
    finished(tasks.noop.enqueue(), attempts=1, ago=3 * 86400)  # Outside the day.
    tasks.noop.enqueue()  # Not finished.
    assert retry_stats() == {
        "default": {
            "finished": 5,
            "ok": 3,
            "retried": 2,
            "retry_percent": 40.0,
            "estimated": False,
        }
    }


def test_the_command_prints_a_table_and_json():
    finished(tasks.noop.enqueue(), seconds=2.0)
    tasks.write_note.enqueue({"text": "x"})
    out = io.StringIO()
    call_command("outbox_stats", stdout=out)
    text = out.getvalue()
    assert "default" in text
    assert "emails" in text
    assert "Succeeded in the last 3600 s: 1 jobs" in text
    out = io.StringIO()
    call_command("outbox_stats", "--json", "--age", "1d", stdout=out)
    figures = json.loads(out.getvalue())
    assert figures["queues"]["default"]["succeeded"] == 1
    assert figures["processing_time"]["count"] == 1
    assert figures["age_seconds"] == 86400


@pytest.mark.parametrize("age", ["0", "-5m", "soon", "99999d"])
def test_the_command_refuses_a_bad_window(age):
    with pytest.raises(CommandError, match="age"):
        call_command("outbox_stats", "--age", age)
