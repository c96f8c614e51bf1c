"""Bulk enqueue: one INSERT for the batch, in the caller's transaction, all or nothing."""

import datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_outbox
from django_outbox import PayloadError
from django_outbox.models import Job, JobStatus
from tests.helpers import count_jobs_from
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_jobs_are_written_and_returned_in_order():
    jobs = tasks.write_note.enqueue_many([{"text": str(n)} for n in range(5)], priority=2)
    assert [job.decoded_payload() for job in jobs] == [{"text": str(n)} for n in range(5)]
    assert all(job.pk is not None for job in jobs)
    stored = Job.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk")
    assert [job.payload["text"] for job in stored] == ["0", "1", "2", "3", "4"]
    assert {(job.queue, job.priority, job.status) for job in stored} == {
        ("emails", 2, JobStatus.READY)
    }
    assert all(abs(job.run_at - timezone.now()) < datetime.timedelta(seconds=5) for job in stored)


def test_a_batch_is_one_insert_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite splits large INSERTs by its variable limit")
    with CaptureQueriesContext(connection) as queries:
        jobs = tasks.noop.enqueue_many([{"n": n} for n in range(500)])
    assert len(queries) == 1
    assert "INSERT INTO" in queries[0]["sql"]
    assert Job.objects.count() == 500
    # The returned jobs are the stored rows, in payload order, with the stored values.
    stored = {job.pk: job for job in Job.objects.all()}
    assert [job.payload for job in jobs] == [{"n": n} for n in range(500)]
    for job in jobs:
        row = stored[job.pk]
        assert (row.payload, row.run_at, row.enqueued_at, row.status, row.max_attempts) == (
            job.payload,
            job.run_at,
            job.enqueued_at,
            job.status,
            job.max_attempts,
        )


def test_the_result_is_a_sequence_of_the_saved_jobs_with_their_ids_at_hand():
    jobs = tasks.noop.enqueue_many([{"n": n} for n in range(7)], delay=60)
    assert isinstance(jobs, django_outbox.EnqueuedJobs)
    assert len(jobs) == 7
    assert jobs.ids == list(Job.objects.order_by("pk").values_list("pk", flat=True))
    # Built on first access, once: the same objects every time.
    assert jobs[0] is jobs[0]
    assert [job.pk for job in jobs[2:4]] == jobs.ids[2:4]
    assert jobs[-1].decoded_payload() == {"n": 6}
    assert list(jobs) == list(Job.objects.order_by("pk"))
    assert jobs == list(Job.objects.order_by("pk"))
    fields = [field.attname for field in Job._meta.concrete_fields]
    for job, row in zip(jobs, Job.objects.order_by("pk"), strict=True):
        assert {name: getattr(job, name) for name in fields} == {
            name: getattr(row, name) for name in fields
        }
        assert not job._state.adding
    assert repr(jobs) == f"<EnqueuedJobs: 7 jobs, ids [{', '.join(map(str, jobs.ids[:5]))}, ...]>"
    with pytest.raises(IndexError):
        jobs[7]
    with pytest.raises(TypeError, match="unhashable"):
        hash(jobs)


def test_a_none_payload_is_stored_as_sql_null_like_enqueue():
    single = tasks.noop.enqueue(None)
    [batched] = tasks.noop.enqueue_many([None])
    assert Job.objects.filter(pk__in=[single.pk, batched.pk], payload__isnull=True).count() == 2


def test_a_batch_with_run_at_or_delay_keeps_it():
    when = timezone.now() + datetime.timedelta(hours=1)
    jobs = tasks.noop.enqueue_many([{"n": 1}, {"n": 2}], run_at=when)
    assert {job.run_at for job in jobs} == {when}
    assert set(Job.objects.values_list("run_at", flat=True)) == {when}


def test_the_batch_is_part_of_the_callers_transaction(second_connection):
    with transaction.atomic():
        django_outbox.enqueue_many("tests.testapp.tasks.noop", [{"n": 1}, {"n": 2}])
        assert count_jobs_from(second_connection) == 0
    assert count_jobs_from(second_connection) == 2

    def enqueue_then_fail():
        with transaction.atomic():
            tasks.noop.enqueue_many([{"n": 3}])
            raise RuntimeError

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert count_jobs_from(second_connection) == 2


def test_one_bad_payload_writes_nothing_and_names_its_index():
    with pytest.raises(PayloadError, match=r"payloads\[2\]: payload\['when'\] is a builtins.set"):
        tasks.noop.enqueue_many([{"n": 1}, {"n": 2}, {"when": {1}}])
    assert not Job.objects.exists()


def test_delayed_batches_and_empty_batches():
    jobs = tasks.noop.enqueue_many([{}, {}], delay=600)
    assert all(job.run_at > timezone.now() + datetime.timedelta(seconds=590) for job in jobs)
    assert not Job.objects.runnable().exists()
    assert tasks.noop.enqueue_many([]) == []
