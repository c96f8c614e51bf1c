"""django_outbox.cron.schedule() and manage.py outbox_cron: each entry's next and last run."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_outbox.cron import schedule
from django_outbox.cron.entries import declared_entries
from django_outbox.cron.scheduler import enqueue_due
from django_outbox.models import Job, JobStatus

pytestmark = pytest.mark.django_db

UTC = datetime.timezone.utc
TASK = "tests.testapp.tasks.note_cron_tick"
CRON = {
    "nightly": {"TASK": TASK, "SCHEDULE": "0 3 * * *", "TIMEZONE": "Europe/Paris"},
    "often": {"TASK": TASK, "SCHEDULE": "*/5 * * * *", "QUEUE": "reports"},
}


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def entries():
    with override_settings(OUTBOX={**settings.OUTBOX, "CRON": CRON}):
        yield declared_entries()


def test_schedule_lists_entries_never_run_with_their_next_run(entries):
    nightly, often = schedule(now=utc(2026, 11, 25, 3, 7))
    assert (nightly.name, nightly.expression, nightly.timezone) == (
        "nightly",
        "0 3 * * *",
        "Europe/Paris",
    )
    # 03:00 in Paris, 02:00 UTC in November.
    assert nightly.next_run == utc(2026, 11, 26, 2, 0)
    assert (nightly.last_run, nightly.last_job_id, nightly.last_job_status) == (None, None, None)
    assert nightly.queue == "default"
    assert often.next_run == utc(2026, 11, 25, 3, 10)
    assert often.queue == "reports"
    assert often.description == "Every fifth minute of every hour"


def test_schedule_shows_the_last_tick_its_job_and_the_jobs_status(entries):
    enqueue_due(entries, now=utc(2026, 11, 25, 3, 0), using="default")
    (job,) = enqueue_due(entries, now=utc(2026, 11, 25, 3, 5, 2), using="default")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    nightly, often = schedule(now=utc(2026, 11, 25, 3, 6))
    assert often.last_run == utc(2026, 11, 25, 3, 5)
    assert often.last_enqueued_at == utc(2026, 11, 25, 3, 5, 2)
    assert (often.last_job_id, often.last_job_status) == (job.pk, "succeeded")
    assert often.since == utc(2026, 11, 25, 3, 0)
    assert nightly.last_run is None
    # Pruned: the tick is still known, its job is not.
    Job.objects.all().delete()
    assert schedule(now=utc(2026, 11, 25, 3, 6))[1].last_job_status is None


def test_schedule_costs_two_queries(entries, django_assert_num_queries):
    enqueue_due(entries, now=utc(2026, 11, 25, 3, 0), using="default")
    enqueue_due(entries, now=utc(2026, 11, 25, 3, 5), using="default")
    with django_assert_num_queries(2):
        schedule()


def test_the_command_prints_a_table(entries):
    enqueue_due(entries, now=utc(2026, 11, 25, 3, 0), using="default")
    (job,) = enqueue_due(entries, now=utc(2026, 11, 25, 3, 5), using="default")
    out = io.StringIO()
    call_command("outbox_cron", stdout=out)
    header, nightly, often = out.getvalue().splitlines()
    assert header.split() == [
        "name",
        "schedule",
        "task",
        "next",
        "run",
        "last",
        "run",
        "last",
        "job",
    ]
    assert nightly.startswith("nightly")
    assert "0 3 * * * (Europe/Paris)" in nightly
    assert nightly.rstrip().endswith("-")
    assert "2026-11-25 03:05 UTC" in often
    assert often.rstrip().endswith(f"#{job.pk} ready")


def test_the_command_prints_json(entries):
    enqueue_due(entries, now=utc(2026, 11, 25, 3, 0), using="default")
    enqueue_due(entries, now=utc(2026, 11, 25, 3, 5), using="default")
    out = io.StringIO()
    call_command("outbox_cron", "--json", stdout=out)
    nightly, often = json.loads(out.getvalue())
    assert often["last_run"] == "2026-11-25T03:05:00+00:00"
    assert often["last_job_status"] == "ready"
    assert often["task"] == TASK
    assert nightly["last_run"] is None
    assert set(nightly) >= {"name", "expression", "timezone", "next_run", "last_job_id", "source"}


def test_the_command_says_when_there_are_no_entries():
    out = io.StringIO()
    call_command("outbox_cron", stdout=out)
    assert "No cron entries" in out.getvalue()
    out = io.StringIO()
    call_command("outbox_cron", "--json", stdout=out)
    assert json.loads(out.getvalue()) == []
