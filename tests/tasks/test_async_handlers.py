"""``async def`` handlers: run to their end by the worker, in the job's transaction."""

import pytest
from asgiref.sync import async_to_sync

import django_outbox
from django_outbox.models import Job, JobStatus
from django_outbox.testing import run_jobs
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_async_handler_runs_to_its_end_with_the_current_job():
    job = tasks.notes_asynchronously.enqueue({"text": "hello"})
    run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert list(Note.objects.values_list("text", flat=True)) == ["hello (attempt 1)"]


def test_an_async_handler_s_writes_roll_back_with_its_failed_attempt():
    job = tasks.notes_asynchronously.enqueue({"text": "retried", "fail_first": True})
    run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    # The first attempt's note rolled back with it.
    assert list(Note.objects.values_list("text", flat=True)) == ["retried (attempt 2)"]


def test_the_testing_helpers_and_a_direct_call_run_it_too():
    tasks.notes_asynchronously.enqueue({"text": "in a test"})
    (ran,) = run_jobs()
    assert ran.result == "in a test"
    assert tasks.notes_asynchronously.is_async
    assert not tasks.noop.is_async


def test_aenqueue_writes_the_job_from_async_code():
    async def view():
        job = await django_outbox.aenqueue(tasks.noop, {"n": 1}, priority=3)
        jobs = await tasks.noop.aenqueue({"n": 2}, fair_key="k")
        many = await django_outbox.aenqueue_many("tests.testapp.tasks.noop", [{"n": 3}, {"n": 4}])
        return job, jobs, many

    job, second, many = async_to_sync(view)()
    assert (job.priority, second.fair_key) == (3, "k")
    assert len(many) == 2
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == [1, 2, 3, 4]


def test_aenqueue_raises_what_enqueue_raises():
    async def view():
        await django_outbox.aenqueue(tasks.noop, {"n": 1}, delay=-1)

    with pytest.raises(django_outbox.EnqueueError, match="delay must not be negative"):
        async_to_sync(view)()
    assert not Job.objects.exists()
