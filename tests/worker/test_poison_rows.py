"""Poison rows: a job whose stored data is bad fails alone; the worker and the queue go on."""

from __future__ import annotations

import pytest
from django.db import connection

from django_outbox.models import Job, JobStatus
from tests.testapp import tasks

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

BAD_TAGS = [
    {"$datetime": "not a date"},
    {"$decimal": "abc"},
    {"$uuid": 5},
    {"$dict": 5},
    {"$date": None},
]


def insert_raw_payload(text: str) -> int:
    """Write a job whose payload column holds ``text`` as it is, as other code could."""
    job = tasks.noop.enqueue({})
    with connection.cursor() as cursor:
        cast = "::jsonb" if connection.vendor == "postgresql" else ""
        cursor.execute(
            f"UPDATE django_outbox_job SET payload = %s{cast} WHERE id = %s", [text, job.pk]
        )
    return job.pk


def deeply_nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_undecodable_payloads_fail_their_own_job_at_once_and_the_worker_goes_on(workers):
    poison = [tasks.noop.enqueue({}).pk for _ in BAD_TAGS]
    for job_id, payload in zip(poison, BAD_TAGS, strict=True):
        Job.objects.filter(pk=job_id).update(payload=payload)
    # SQLite's JSON functions refuse more than 1,000 levels; PostgreSQL takes 5,000, and so
    # does MariaDB (its payload column has no JSON check: migration 0017).
    levels = 900 if connection.vendor == "sqlite" else 5000
    poison.append(insert_raw_payload(deeply_nested(levels)))
    healthy = [job.pk for job in tasks.noop.enqueue_many([{"n": n} for n in range(20)])]

    worker = workers("--burst", "--concurrency", "2")

    assert worker.wait(timeout=60) == 0, worker.stderr
    # Not the whole row: the ORM's own JSON parsing fails on the deeply nested payload.
    outcomes = Job.objects.filter(pk__in=poison).values_list("status", "attempts", "last_error")
    assert len(outcomes) == len(poison)
    for status, attempts, last_error in outcomes:
        # Failed for good on the first attempt: retrying cannot change the stored data.
        assert (status, attempts) == (JobStatus.FAILED, 1), last_error
        assert "cannot be decoded" in last_error
        assert "not retried" in last_error
    assert Job.objects.filter(pk__in=healthy, status=JobStatus.SUCCEEDED).count() == 20
    assert worker.stderr.count("Traceback") <= len(poison)


def test_a_claimable_row_with_used_up_attempts_does_not_stop_the_queue(workers):
    """A bad manual edit: ready with attempts == max_attempts. Today's claim gives it one more
    attempt, as the admin's retry would; it must never make every claim fail."""
    stuck = tasks.always_fails.enqueue({})
    Job.objects.filter(pk=stuck.pk).update(attempts=3, max_attempts=3)
    healthy = [job.pk for job in tasks.noop.enqueue_many([{}] * 10)]

    worker = workers("--burst")

    assert worker.wait(timeout=60) == 0, worker.stderr
    row = Job.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts, row.max_attempts) == (JobStatus.FAILED, 4, 4)
    assert Job.objects.filter(pk__in=healthy, status=JobStatus.SUCCEEDED).count() == 10
    assert "attempts_within_max" not in worker.stderr


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite's JSON check refuses more than 1,000 levels"
)
def test_a_row_whose_payload_cannot_be_parsed_still_loads_and_shows_in_the_admin(admin_client):
    """JSONField lets RecursionError through: one such row made the ORM, and so the admin's
    job page, fail (a 500). (SQLite's JSON check refuses more than 1,000 levels, which
    Python still parses.)"""
    job_id = insert_raw_payload(deeply_nested(5000))

    job = Job.objects.get(pk=job_id)

    assert isinstance(job.payload, str)
    assert job.payload.startswith("[[[[")
    response = admin_client.get(f"/admin/django_outbox/job/{job_id}/change/")
    assert response.status_code == 200
    assert b"[[[[" in response.content
