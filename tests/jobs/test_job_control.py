"""Snooze, halt and resume, cancel: a handler's and an operator's ways to steer a job."""

import datetime
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_outbox import (
    Cancellation,
    JobNotFound,
    JobStateError,
    PayloadError,
    cancel,
    resume,
    signals,
)
from django_outbox.db import queries_for
from django_outbox.jobs.transitions import extend_leases, rescue_expired_leases, retry_failed
from django_outbox.models import Job, JobStatus
from django_outbox.retry import RetryPolicy
from django_outbox.worker.runner import Outcome, run_job
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_run_counts():
    tasks.runs.clear()


@pytest.fixture
def received():
    """Record the job-control signals a worker sends, as (signal name, job id, extra)."""
    seen = []

    def receiver(name):
        def record(sender, job, **kwargs):
            seen.append((name, job.id, kwargs.get("seconds", kwargs.get("reason"))))

        return record

    receivers = {
        signal: receiver(name)
        for signal, name in (
            (signals.job_snoozed, "snoozed"),
            (signals.job_halted, "halted"),
            (signals.job_cancelled, "cancelled"),
        )
    }
    for signal, function in receivers.items():
        signal.connect(function)
    yield seen
    for signal, function in receivers.items():
        signal.disconnect(function)


# Snooze.


def test_a_snoozed_job_runs_again_without_using_an_attempt(received):
    # max_attempts=1: were a snooze an attempt, the second run would be one too many.
    job = tasks.snoozes.enqueue({"times": 2, "seconds": 0})
    stats = run_worker()
    job.refresh_from_db()
    assert tasks.runs[job.pk] == 3
    assert job.status == JobStatus.SUCCEEDED
    assert (job.attempts, job.max_attempts) == (1, 1)
    assert stats.outcomes[Outcome.SNOOZED] == 2
    assert stats.outcomes[Outcome.SUCCEEDED] == 1
    # atomic=True: the snoozed runs' writes rolled back, the last run's committed.
    assert list(Note.objects.values_list("text", flat=True)) == ["run 3"]
    assert received == [("snoozed", job.pk, 0.0), ("snoozed", job.pk, 0.0)]
    assert "snoozed" in str(stats)


def test_a_snoozed_job_waits_for_its_time_as_a_ready_job():
    job = tasks.snoozes.enqueue({"times": 1, "seconds": 3600})
    before = timezone.now()
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.READY
    assert job.attempts == 0
    assert job.lease_token is None
    assert job.lease_expires_at is None
    assert job.last_error == ""
    due_in = (job.run_at - before).total_seconds()
    assert 3590 < due_in < 3610
    # Nothing runnable until then.
    assert run_worker().claimed == 0


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        (-1, "seconds must be a finite number >= 0"),
        ("nan", "seconds must be a finite number >= 0"),
        ("inf", "seconds must be a finite number >= 0"),
        ([1], "seconds must be a number or a timedelta, not list"),
        (10**12, "at most 3650 days"),
    ],
)
def test_a_snooze_that_cannot_be_honoured_fails_the_attempt_with_the_reason(seconds, message):
    job = tasks.snoozes.enqueue({"times": 1, "seconds": seconds})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.last_error.startswith("ValueError: tests.testapp.tasks.snoozes raised Snooze(")
    assert message in job.last_error


def test_snooze_takes_a_timedelta():
    job = tasks.snoozes.enqueue({"times": 1, "seconds": 0})
    from django_outbox import Snooze

    assert Snooze(datetime.timedelta(minutes=2)).seconds == 120
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


# Halt and resume.


def test_a_halted_job_waits_until_resumed_and_gets_the_data(received):
    job = tasks.awaits_approval.enqueue({"order": 42})
    stats = run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.HALTED
    assert job.halt_reason == "waiting for approval of order 42"
    assert job.attempts == 0
    assert job.lease_token is None
    assert job.finished_at is None
    assert stats.outcomes[Outcome.HALTED] == 1
    assert received == [("halted", job.pk, "waiting for approval of order 42")]
    # The halted run's writes rolled back, and no worker takes a halted job.
    assert not Note.objects.exists()
    assert run_worker().claimed == 0

    resume(job.pk, {"by": "ada", "at": timezone.now()})
    job.refresh_from_db()
    assert job.status == JobStatus.READY
    assert job.halt_reason == ""
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    # Two runs, one attempt: the halt gave its attempt back.
    assert tasks.runs[job.pk] == 2
    assert (job.attempts, job.max_attempts) == (1, 2)
    assert set(Note.objects.values_list("text", flat=True)) == {
        "written before halting",
        "approved by ada",
    }
    # Kept for the admin: what the job was resumed with.
    assert job.decoded_payload() == {"order": 42}
    assert job.resume_data["by"] == "ada"


def test_resume_takes_a_job_as_well_as_an_id():
    job = tasks.awaits_approval.enqueue({"order": 7})
    run_worker()
    job.refresh_from_db()
    resume(job, {"by": "grace"})
    run_worker()
    assert Note.objects.filter(text="approved by grace").exists()


def test_a_resume_rolled_back_with_its_transaction_leaves_the_job_halted():
    job = tasks.awaits_approval.enqueue({"order": 1})
    run_worker()
    with transaction.atomic():
        resume(job.pk, {"by": "ada"})
        transaction.set_rollback(True)
    job.refresh_from_db()
    assert job.status == JobStatus.HALTED
    assert job.resume_data is None


def test_resume_refuses_what_it_cannot_do_and_changes_nothing():
    halted = tasks.awaits_approval.enqueue({"order": 1})
    run_worker()
    ready = tasks.noop.enqueue()
    with pytest.raises(JobNotFound, match="No job has id 999999"):
        resume(999999)
    with pytest.raises(JobStateError, match=f"Job {ready.pk} is ready, not halted"):
        resume(ready.pk)
    with pytest.raises(TypeError, match="Pass a Job or a job's id"):
        resume("12")  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="data"):
        resume(halted.pk, {"file": object()})
    halted.refresh_from_db()
    assert halted.status == JobStatus.HALTED
    # The caller's transaction is still usable after each refusal.
    with transaction.atomic():
        resume(halted.pk, {"by": "ada"})
    halted.refresh_from_db()
    assert halted.status == JobStatus.READY


def test_a_halted_job_can_be_halted_again_and_each_resume_brings_its_own_data():
    job = tasks.awaits_approval.enqueue({"order": 3})
    run_worker()
    Job.objects.filter(pk=job.pk).update(resume_data=None)
    resume(job.pk)  # No data: the handler halts again.
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.HALTED
    resume(job.pk, {"by": "linus"})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert Note.objects.filter(text="approved by linus").exists()


# Cancel.


def test_a_job_cancelled_before_it_ran_never_runs():
    job = tasks.write_note.enqueue({"text": "never"})
    assert cancel(job) is Cancellation.CANCELLED
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.finished_at is not None
    assert run_worker().claimed == 0
    assert not Note.objects.exists()


def test_retrying_and_halted_jobs_can_be_cancelled(settings):
    settings.OUTBOX = {**settings.OUTBOX, "RETRY": {"BASE_DELAY": 3600}}
    retrying = tasks.always_fails.enqueue({})
    halted = tasks.awaits_approval.enqueue({"order": 9})
    run_worker()
    assert Job.objects.get(pk=retrying.pk).status == JobStatus.RETRYING
    assert cancel(retrying.pk) is Cancellation.CANCELLED
    assert cancel(halted.pk) is Cancellation.CANCELLED
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.CANCELLED}


def test_cancelling_a_finished_job_changes_nothing_and_an_unknown_one_is_an_error():
    job = tasks.noop.enqueue()
    run_worker()
    assert cancel(job.pk) is Cancellation.FINISHED
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    with pytest.raises(JobNotFound, match="No job has id 999999"):
        cancel(999999)
    with pytest.raises(TypeError):
        cancel(None)  # type: ignore[arg-type]
    with pytest.raises(JobNotFound, match="never saved"):
        cancel(Job(task_name="x", queue="default", max_attempts=1))


def test_a_cancelled_job_can_be_retried_by_hand():
    job = tasks.write_note.enqueue({"text": "second chance"})
    cancel(job)
    assert retry_failed(Job.objects.filter(pk=job.pk)) == 1
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert not job.cancel_requested


@pytest.fixture
def fast_heartbeat(settings, handler_gate):
    settings.OUTBOX = {**settings.OUTBOX, "LEASE_SECONDS": 1, "HEARTBEAT_SECONDS": 0.1}


def test_a_running_job_sees_the_cancel_and_ends_cancelled_with_its_writes_rolled_back(
    fast_heartbeat, worker_thread, received
):
    job = tasks.stops_when_cancelled.enqueue({})
    worker = worker_thread(concurrency=1)
    assert tasks.handler_started.wait(10)
    assert cancel(job.pk) is Cancellation.REQUESTED
    # Asking twice is the same request.
    assert cancel(job.pk) is Cancellation.REQUESTED
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED)
    job.refresh_from_db()
    assert job.finished_at is not None
    assert job.lease_token is None
    # atomic=True: the note the handler wrote once it saw the cancel was rolled back.
    assert not Note.objects.exists()
    wait_until(lambda: worker.stats.outcomes[Outcome.CANCELLED] == 1)
    assert received == [("cancelled", job.pk, None)]


def test_a_handler_that_ignores_the_cancel_still_ends_cancelled(fast_heartbeat, worker_thread):
    job = tasks.ignores_cancel.enqueue({})
    worker = worker_thread(concurrency=1)
    assert tasks.handler_started.wait(10)
    assert cancel(job.pk) is Cancellation.REQUESTED
    # The worker stops extending the lease once it sees the request.
    wait_until(lambda: worker.held.all() and worker.held.all()[0].cancel_requested)
    tasks.handler_may_finish.set()
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED)
    assert worker.stats.outcomes[Outcome.SUCCEEDED] == 0


def test_an_expired_lease_of_a_job_asked_to_cancel_ends_cancelled_not_retried():
    job = tasks.noop.enqueue()
    claimed = queries_for(connection).claim(connection, "gone", None, 1, 30)
    assert [c.id for c in claimed] == [job.pk]
    cancel(job.pk)
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - datetime.timedelta(1))
    assert rescue_expired_leases("default", history_limit=10) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.attempts == 1
    assert job.errors == []


def test_a_cancel_that_arrives_after_the_success_changes_nothing(worker_thread):
    job = tasks.noop.enqueue()
    run_worker()
    assert cancel(job.pk) is Cancellation.FINISHED
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == (JobStatus.SUCCEEDED, False)


def test_cancel_is_part_of_the_callers_transaction():
    job = tasks.noop.enqueue()
    with transaction.atomic():
        cancel(job.pk)
        transaction.set_rollback(True)
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY


@pytest.mark.postgresql
def test_resume_wakes_idle_workers_at_once(worker_thread, settings):
    # A poll long enough that only the NOTIFY can explain a prompt run.
    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": 60}
    job = tasks.awaits_approval.enqueue({"order": 5})
    worker_thread(concurrency=1)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.HALTED)
    time.sleep(0.3)  # The worker is idle, waiting on its LISTEN.
    started = time.monotonic()
    resume(job.pk, {"by": "ada"})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=10)
    assert time.monotonic() - started < 5


def test_the_heartbeat_reports_the_cancel_request_and_stops_extending_that_lease():
    asked, other = tasks.noop.enqueue(), tasks.noop.enqueue()
    claimed = queries_for(connection).claim(connection, "w", None, 2, 30)
    before = dict(Job.objects.values_list("pk", "lease_expires_at"))
    cancel(asked.pk)
    time.sleep(0.01)
    heartbeat = extend_leases(claimed, 60, "default")
    assert heartbeat.cancel_requested == {asked.pk}
    assert heartbeat.lost == set()
    after = dict(Job.objects.values_list("pk", "lease_expires_at"))
    assert after[asked.pk] == before[asked.pk]
    assert after[other.pk] > before[other.pk]  # type: ignore[operator]


def test_a_claimed_job_cancelled_before_it_started_never_runs():
    job = tasks.write_note.enqueue({"text": "never"})
    (claimed,) = queries_for(connection).claim(connection, "w", None, 1, 30)
    claimed.mark_cancel_requested()
    outcome = run_job(claimed, using="default", history_limit=10, fallback=RetryPolicy())
    assert outcome is Outcome.CANCELLED
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    assert not Note.objects.exists()
