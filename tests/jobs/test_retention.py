"""Retention: finished jobs older than OUTBOX["RETENTION"] are deleted, in small batches, by the
workers; unfinished jobs never are, whatever their age."""

from __future__ import annotations

import datetime
import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.jobs.transitions import prune_finished
from django_outbox.models import Job, JobStatus
from django_outbox.tasks.enqueue import build_job
from tests.bulk_rows import insert_jobs
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 86400.0
RETENTION: dict[str, float | None] = {"SUCCEEDED": DAY, "FAILED": 7 * DAY}


def make_jobs(count: int, status: str, finished_ago: datetime.timedelta | None) -> set[int]:
    """Create ``count`` jobs in ``status``, finished ``finished_ago`` (None: never finished)."""
    jobs = Job.objects.bulk_create([build_job(tasks.noop, {"n": n}) for n in range(count)])
    ids = {job.pk for job in jobs}
    finished_at = None if finished_ago is None else timezone.now() - finished_ago
    lease = {}
    if status == JobStatus.RUNNING:
        lease = {"lease_token": uuid.uuid4(), "lease_expires_at": timezone.now(), "attempts": 1}
    Job.objects.filter(pk__in=ids).update(status=status, finished_at=finished_at, **lease)
    return ids


def remaining() -> set[int]:
    return set(Job.objects.values_list("pk", flat=True))


def test_prune_deletes_finished_jobs_older_than_their_status_retention():
    old_succeeded = make_jobs(2, JobStatus.SUCCEEDED, datetime.timedelta(days=2))
    new_succeeded = make_jobs(2, JobStatus.SUCCEEDED, datetime.timedelta(hours=23))
    old_failed = make_jobs(2, JobStatus.FAILED, datetime.timedelta(days=8))
    # Older than SUCCEEDED's retention, but failed jobs are kept a week.
    new_failed = make_jobs(2, JobStatus.FAILED, datetime.timedelta(days=2))

    assert prune_finished("default", RETENTION) == 4

    assert remaining() == new_succeeded | new_failed
    assert not remaining() & (old_succeeded | old_failed)
    assert prune_finished("default", RETENTION) == 0


def test_retention_is_measured_in_seconds_by_the_database_clock():
    kept = make_jobs(2, JobStatus.SUCCEEDED, datetime.timedelta(seconds=30))
    kept |= make_jobs(2, JobStatus.FAILED, datetime.timedelta(seconds=50))
    make_jobs(2, JobStatus.SUCCEEDED, datetime.timedelta(seconds=90))
    make_jobs(2, JobStatus.FAILED, datetime.timedelta(seconds=75))

    assert prune_finished("default", {"SUCCEEDED": 60, "FAILED": 60.5}) == 4

    assert remaining() == kept


@pytest.mark.parametrize(
    "status", [JobStatus.READY, JobStatus.RUNNING, JobStatus.RETRYING], ids=str
)
def test_prune_keeps_unfinished_jobs_whatever_their_age(status):
    # An old finished_at, as a job retried from the admin keeps until it runs again.
    unfinished = make_jobs(3, status, datetime.timedelta(days=365))
    Job.objects.filter(pk__in=unfinished).update(
        enqueued_at=timezone.now() - datetime.timedelta(days=365)
    )
    never_finished = make_jobs(3, status, None)

    assert prune_finished("default", {"SUCCEEDED": 1, "FAILED": 1}) == 0

    assert remaining() == unfinished | never_finished


def test_a_retention_of_none_keeps_those_jobs_forever():
    ancient_succeeded = make_jobs(3, JobStatus.SUCCEEDED, datetime.timedelta(days=3650))
    make_jobs(3, JobStatus.FAILED, datetime.timedelta(days=3650))

    assert prune_finished("default", {"SUCCEEDED": None, "FAILED": 60}) == 3

    assert remaining() == ancient_succeeded
    assert prune_finished("default", {"SUCCEEDED": None, "FAILED": None}) == 0
    assert remaining() == ancient_succeeded


def test_prune_deletes_at_most_a_batch_per_status_per_call():
    succeeded = make_jobs(7, JobStatus.SUCCEEDED, datetime.timedelta(days=30))
    failed = make_jobs(5, JobStatus.FAILED, datetime.timedelta(days=30))

    assert prune_finished("default", RETENTION, batch_size=3) == 6
    assert len(remaining() & succeeded) == 4
    assert len(remaining() & failed) == 2
    assert prune_finished("default", RETENTION, batch_size=3) == 5
    assert len(remaining() & succeeded) == 1
    assert not remaining() & failed
    assert prune_finished("default", RETENTION, batch_size=3) == 1
    assert prune_finished("default", RETENTION, batch_size=3) == 0
    assert not Job.objects.exists()


def test_a_worker_prunes_old_finished_jobs_in_the_background(settings, worker_thread):
    settings.OUTBOX = {
        **settings.OUTBOX,
        "LEASE_SECONDS": 4,
        "HEARTBEAT_SECONDS": 0.1,
        "RETENTION": {"SUCCEEDED": 3600, "FAILED": 3600},
    }
    # More than one prune batch of each.
    old = make_jobs(1200, JobStatus.SUCCEEDED, datetime.timedelta(hours=2))
    old |= make_jobs(600, JobStatus.FAILED, datetime.timedelta(hours=2))
    recent = make_jobs(10, JobStatus.SUCCEEDED, datetime.timedelta(minutes=5))
    recent |= make_jobs(10, JobStatus.FAILED, datetime.timedelta(minutes=5))
    waiting = make_jobs(5, JobStatus.READY, None)
    Job.objects.filter(pk__in=waiting).update(run_at=timezone.now() + datetime.timedelta(hours=1))

    worker_thread(concurrency=1)
    wait_until(
        lambda: not Job.objects.filter(pk__in=old).exists(),
        timeout=10,
        what="the old finished jobs to be pruned",
    )

    assert remaining() == recent | waiting


def bulk_finished(count: int, status: str, finished_ago: datetime.timedelta) -> None:
    insert_jobs(
        count, task_name=tasks.noop.name, status=status, finished_at=timezone.now() - finished_ago
    )


@pytest.mark.postgresql
@pytest.mark.parametrize("expired", [40, 3000], ids=["few-expired", "backlog"])
def test_the_prune_query_uses_the_finished_index(expired):
    # As in a real table: the expired jobs are the oldest (lowest ids), and many jobs finished
    # within the retention come after them. A prune batch must reach the expired ones through
    # the index, not by reading every newer job first.
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        bulk_finished(expired, status, datetime.timedelta(days=30))
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        bulk_finished(10_000, status, datetime.timedelta(minutes=5))
    Job.objects.bulk_create([build_job(tasks.noop, {}) for _ in range(50)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_job")

    with CaptureQueriesContext(connection) as captured:
        assert prune_finished("default", RETENTION, batch_size=500) == 2 * min(expired, 500)
    # The prune's own reads, two per status (jobs no job depends on, then those some job
    # does); the others are Django's look for the deleted jobs' dependencies.
    selects = [
        query["sql"]
        for query in captured
        if query["sql"].startswith('SELECT "django_outbox_job"."id" AS "pk"')
    ]
    assert len(selects) == 4, selects

    with connection.cursor() as cursor:
        for select in selects:
            cursor.execute("EXPLAIN " + select)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            # The dependents' read goes along the smaller outbox_job_finished_parents.
            assert re.search(r"(using|on) outbox_job_finished(_parents)?\s", plan), plan
            assert "Seq Scan" not in plan, plan
