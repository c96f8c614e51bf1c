"""django_outbox.testing: run jobs inside a test's transaction, assert what was enqueued, and
simulate the crashes that make a job run twice."""

import pytest
from django.db import connection, transaction

from django_outbox import JobNotFound, JobStateError, testing
from django_outbox.models import Job, JobStatus
from django_outbox.testing.runs import WORKER_ID
from tests.testapp import tasks
from tests.testapp.models import Note

# Not transactional: each test runs inside one transaction that is rolled back after it, as
# most Django tests do; the helpers run jobs inside it.
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _nothing_sent_yet():
    tasks.sent.clear()
    tasks.runs.clear()


def test_run_jobs_runs_what_is_runnable_in_claim_order_inside_the_tests_transaction():
    assert connection.in_atomic_block
    low = tasks.write_note.enqueue({"text": "low"}, priority=0)
    high = tasks.write_note.enqueue({"text": "high"}, priority=5)
    later = tasks.write_note.enqueue({"text": "later"}, delay=3600)
    ran = testing.run_jobs()
    assert [job.id for job in ran] == [high.pk, low.pk]
    assert list(Note.objects.order_by("id").values_list("text", flat=True)) == ["high", "low"]
    assert Job.objects.get(pk=later.pk).status == JobStatus.READY
    assert Job.objects.get(pk=low.pk).worker_id == WORKER_ID
    # Still inside the test's transaction, which rolls everything back at its end.
    assert connection.in_atomic_block


def test_run_jobs_runs_the_jobs_that_jobs_enqueue_and_can_keep_to_one_queue():
    tasks.enqueues_a_receipt.enqueue({"order": 7})
    tasks.write_note.enqueue({"text": "an email"})
    ran = testing.run_jobs(queue="emails")
    assert [job.task_name for job in ran] == [tasks.write_note.name]
    ran = testing.run_jobs()
    assert [job.task_name for job in ran] == [
        tasks.enqueues_a_receipt.name,
        tasks.sends_receipt.name,
    ]
    assert ran[0].result == "enqueued"
    assert tasks.sent == ["receipt 7"]


def test_run_jobs_records_failures_and_leaves_retries_for_later(settings):
    settings.OUTBOX = {**settings.OUTBOX, "RETRY": {"BASE_DELAY": 60}}
    job = tasks.fails_once.enqueue()
    (ran,) = testing.run_jobs()
    assert isinstance(ran.error, ConnectionError)
    failed = Job.objects.get(pk=job.pk)
    assert failed.status == JobStatus.RETRYING
    assert failed.last_error == "ConnectionError: first attempt fails"


def test_run_jobs_stops_a_job_that_snoozes_forever():
    tasks.snoozes.enqueue({"times": 10**6, "seconds": 0})
    with pytest.raises(testing.RunLimitExceeded, match="ran 50 jobs and more are runnable"):
        testing.run_jobs(limit=50)


def test_consume_returns_what_the_handler_returned():
    tasks.sends_receipt.enqueue({"order": 1})
    assert testing.consume() == "sent receipt 1"
    testing.assert_not_enqueued(tasks.sends_receipt)


def test_consume_raises_what_the_handler_raised_after_recording_it(settings):
    settings.OUTBOX = {**settings.OUTBOX, "RETRY": {"BASE_DELAY": 60}}
    job = tasks.always_fails.enqueue({"message": "smtp down"})
    with pytest.raises(RuntimeError, match="smtp down"):
        testing.consume()
    assert Job.objects.get(pk=job.pk).status == JobStatus.RETRYING


def test_consume_with_nothing_runnable_says_so():
    tasks.write_note.enqueue({"text": "later"}, delay=60)
    with pytest.raises(JobNotFound, match="No job is runnable now in queue 'emails'"):
        testing.consume("emails")


def test_force_retry_runs_a_succeeded_job_again():
    job = tasks.sends_receipt.enqueue({"order": 3})
    testing.run_jobs()
    assert testing.force_retry(job) == "sent receipt 3"
    # Not idempotent: the receipt went out twice. The idempotent task sends it once.
    assert tasks.sent == ["receipt 3", "receipt 3"]
    once = tasks.sends_receipt_once.enqueue({"order": 4})
    testing.run_jobs()
    testing.force_retry(once.pk)
    assert tasks.sent.count("receipt 4") == 1
    after = Job.objects.get(pk=once.pk)
    assert (after.status, after.attempts) == (JobStatus.SUCCEEDED, 2)


def test_force_retry_refuses_a_job_that_did_not_succeed():
    job = tasks.noop.enqueue()
    with pytest.raises(JobStateError, match="is ready: force_retry runs succeeded jobs again"):
        testing.force_retry(job)
    with pytest.raises(JobNotFound):
        testing.force_retry(999999)


def test_assert_enqueued_matches_task_payload_queue_and_count():
    tasks.write_note.enqueue({"text": "a"})
    tasks.write_note.enqueue({"text": "a"})
    tasks.write_note.enqueue({"text": "b"}, queue="other")
    jobs = testing.assert_enqueued(tasks.write_note, payload={"text": "a"}, count=2)
    assert len(jobs) == 2
    testing.assert_enqueued("tests.testapp.tasks.write_note", queue="other", count=1)
    testing.assert_not_enqueued(tasks.noop)
    with pytest.raises(AssertionError, match=r"Expected 1 enqueued job\(s\) of task .*found 2"):
        testing.assert_enqueued(tasks.write_note, payload={"text": "a"}, count=1)
    with pytest.raises(AssertionError, match="Expected no enqueued job"):
        testing.assert_not_enqueued(tasks.write_note, payload={"text": "b"})


def test_a_rolled_back_enqueue_is_not_enqueued():
    with transaction.atomic():
        tasks.noop.enqueue()
        transaction.set_rollback(True)
    testing.assert_not_enqueued(tasks.noop)


# Crashes.


def test_a_crash_after_the_handler_runs_it_again_and_shows_what_is_not_idempotent():
    job = tasks.sends_receipt.enqueue({"order": 5})
    crashed = testing.crash_after_handler()
    assert crashed.id == job.pk
    # atomic=True: the note rolled back with the crash; the email had gone out.
    assert not Note.objects.exists()
    assert tasks.sent == ["receipt 5"]
    taken_back = Job.objects.get(pk=job.pk)
    assert taken_back.status == JobStatus.RETRYING
    assert "Lease expired" in taken_back.last_error
    testing.run_jobs()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert tasks.sent == ["receipt 5", "receipt 5"]


def test_a_crash_of_a_non_atomic_job_keeps_its_writes_and_runs_it_again():
    tasks.sends_receipt_non_atomic.enqueue({"order": 6})
    testing.crash_after_handler()
    testing.run_jobs()
    assert Note.objects.filter(text="receipt for order 6").count() == 2


def test_a_take_over_while_running_fences_the_first_attempt():
    job = tasks.sends_receipt.enqueue({"order": 8})
    first, second = testing.take_over_while_running()
    assert (first.attempts, second.attempts) == (1, 2)
    assert first.lease_lost
    after = Job.objects.get(pk=job.pk)
    assert (after.status, after.attempts) == (JobStatus.SUCCEEDED, 2)
    # The first attempt's note rolled back (its lease was lost), the second's committed.
    assert list(Note.objects.values_list("job_id", flat=True)) == [job.pk]
    assert tasks.sent == ["receipt 8", "receipt 8"]


def test_a_late_completion_changes_nothing():
    job = tasks.sends_receipt_once.enqueue({"order": 9})
    first, second = testing.complete_late()
    assert not first.lease_lost
    assert second.error is None
    after = Job.objects.get(pk=job.pk)
    assert (after.status, after.attempts) == (JobStatus.SUCCEEDED, 2)
    # The first run's note rolled back, so the idempotent task sent the receipt again: an
    # idempotency key kept in the job's own transaction does not see an email already sent.
    assert tasks.sent == ["receipt 9", "receipt 9"]


def test_the_pytest_fixture_gives_the_helpers(outbox):
    tasks.noop.enqueue()
    outbox.assert_enqueued(tasks.noop, count=1)
    assert len(outbox.run_jobs()) == 1


def test_run_jobs_keeps_to_dependencies_and_lock_keys():
    parent = tasks.write_note.enqueue({"text": "parent"}, priority=0)
    tasks.write_note.enqueue({"text": "child"}, depends_on=parent, priority=9)
    tasks.write_note.enqueue({"text": "first in line"}, lock="k")
    tasks.write_note.enqueue({"text": "second in line"}, lock="k")
    testing.run_jobs()
    texts = list(Note.objects.order_by("id").values_list("text", flat=True))
    assert texts.index("parent") < texts.index("child")
    assert texts.index("first in line") < texts.index("second in line")
