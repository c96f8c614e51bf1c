"""Leases: claims hold jobs for a while, heartbeats extend them, and stale owners are fenced."""

import datetime
import logging
import threading
import uuid
from collections import Counter

import pytest
from django.utils import timezone

from django_outbox.jobs.transitions import (
    Failure,
    database_time_in,
    extend_leases,
    mark_succeeded,
    record_failure,
    release,
    rescue_expired_leases,
)
from django_outbox.models import Job, JobStatus, WorkerProcess
from django_outbox.worker.loop import Worker
from django_outbox.worker.runner import Outcome
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note
from tests.worker.helpers import claim, expire

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_claim_sets_a_lease_in_database_time():
    tasks.noop.enqueue({})
    (job,) = claim(lease_seconds=30)
    row = Job.objects.get(pk=job.id)
    assert row.status == JobStatus.RUNNING
    assert row.lease_token == job.lease_token
    assert row.worker_id == "test-worker"
    assert row.attempts == job.attempts == 1
    assert row.lease_expires_at is not None
    remaining = row.lease_expires_at - timezone.now()
    assert datetime.timedelta(seconds=25) < remaining < datetime.timedelta(seconds=35)


def test_writes_with_a_stale_token_change_nothing():
    tasks.noop.enqueue({})
    (job,) = claim()
    new_owner = uuid.uuid4()
    Job.objects.filter(pk=job.id).update(lease_token=new_owner)
    assert mark_succeeded(job, "default") is False
    failure = Failure(error="late", retry_in=0)
    assert (
        record_failure(
            job_id=job.id,
            lease_token=job.lease_token,
            attempt=1,
            worker_id="stale",
            failure=failure,
            history_limit=10,
            using="default",
        )
        is None
    )
    assert extend_leases([job], 30, "default").lost == {job.id}
    assert release([job], "default") == 0
    row = Job.objects.get(pk=job.id)
    assert (row.status, row.lease_token, row.errors, row.attempts) == (
        JobStatus.RUNNING,
        new_owner,
        [],
        1,
    )


@pytest.fixture
def held_handler(settings):
    """Start a one-thread worker; yield it once its handler is running and waiting."""
    settings.OUTBOX = {**settings.OUTBOX, "LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 0.2}
    tasks.handler_started.clear()
    tasks.handler_may_finish.clear()
    tasks.lease_lost_seen.clear()
    threads = []

    def start(task):
        job = task.enqueue({})
        worker = Worker(burst=True, concurrency=1)
        thread = threading.Thread(target=worker.run)
        threads.append(thread)
        thread.start()
        assert tasks.handler_started.wait(10)
        return job, worker

    yield start
    tasks.handler_may_finish.set()
    for thread in threads:
        thread.join(10)


def test_heartbeats_extend_the_leases_of_running_jobs(held_handler):
    # Non-atomic: an atomic handler on SQLite holds the write lock, and the test reads only.
    job, _worker = held_handler(tasks.waits_for_test_non_atomic)
    first = Job.objects.get(pk=job.pk).lease_expires_at
    assert first is not None
    wait_until(lambda: (Job.objects.get(pk=job.pk).lease_expires_at or first) > first)
    tasks.handler_may_finish.set()
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    assert tasks.lease_lost_seen == [False]


def take_over(job_id):
    """Do what another worker does after an expired lease: a new token, a new owner."""
    new_owner = uuid.uuid4()
    Job.objects.filter(pk=job_id).update(lease_token=new_owner, worker_id="new-owner")
    return new_owner


def assert_untouched_by_the_old_owner(job_id, new_owner):
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.lease_token, row.worker_id, row.errors) == (
        JobStatus.RUNNING,
        new_owner,
        "new-owner",
        [],
    )


@pytest.mark.row_locks
def test_a_handler_whose_lease_is_taken_away_has_its_writes_rolled_back(held_handler):
    # PostgreSQL only: on SQLite the running atomic handler holds the database's only write
    # lock, so nobody can take the job over mid-run (the next test covers fencing there).
    job, worker = held_handler(tasks.waits_for_test)
    new_owner = take_over(job.pk)
    # The next heartbeat tells the handler.
    wait_until(lambda: any(held.lease_lost for held in worker.held.all()))
    tasks.handler_may_finish.set()
    wait_until(lambda: worker.stats.outcomes[Outcome.LEASE_LOST] == 1)
    assert tasks.lease_lost_seen == [True]
    # The handler's note was rolled back, and the new owner's state is untouched.
    assert not Note.objects.exists()
    assert_untouched_by_the_old_owner(job.pk, new_owner)


def test_a_non_atomic_handler_that_lost_its_lease_cannot_overwrite_the_new_owner(held_handler):
    job, worker = held_handler(tasks.waits_for_test_non_atomic)
    new_owner = take_over(job.pk)
    wait_until(lambda: any(held.lease_lost for held in worker.held.all()))
    tasks.handler_may_finish.set()
    wait_until(lambda: worker.stats.outcomes[Outcome.LEASE_LOST] == 1)
    assert tasks.lease_lost_seen == [True]
    assert_untouched_by_the_old_owner(job.pk, new_owner)


def test_expired_leases_are_taken_back_counting_the_attempt():
    job = tasks.write_note.enqueue({"text": "second try"})
    (claimed,) = claim(worker_id="crashed-worker")
    expire(job.pk, attempts=1)
    assert rescue_expired_leases("default", history_limit=10) == 1
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.RETRYING
    assert row.lease_token is None
    assert row.attempts == 1
    assert "Lease expired: worker crashed-worker" in row.last_error
    assert row.errors[0]["attempt"] == 1
    # The vanished worker, were it to come back, is fenced out.
    assert mark_succeeded(claimed, "default") is False
    run_worker()
    row.refresh_from_db()
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)
    assert Note.objects.get().text == "second try"


def test_an_expired_last_attempt_fails_the_job():
    job = tasks.always_fails.enqueue({})  # max_attempts=3
    claim()
    expire(job.pk, attempts=3)
    rescue_expired_leases("default", history_limit=10)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.FAILED
    assert row.finished_at is not None


def test_leases_not_yet_expired_are_left_alone():
    tasks.noop.enqueue({})
    claim(lease_seconds=30)
    assert rescue_expired_leases("default", history_limit=10) == 0
    assert Job.objects.running().count() == 1


def test_the_worker_rescues_expired_leases_before_claiming():
    job = tasks.noop.enqueue({})
    claim(worker_id="crashed-worker")
    expire(job.pk, attempts=1)
    run_worker()
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_released_jobs_are_ready_again_as_if_never_claimed():
    job = tasks.noop.enqueue({})
    claimed = claim()
    assert release(claimed, "default") == 1
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.lease_token, row.worker_id) == (
        JobStatus.READY,
        0,
        None,
        "",
    )


def registered(worker_id, *, started_seconds_ago, beat_seconds_ago):
    """A registry row as a worker that started and last beat so many seconds ago wrote it."""
    WorkerProcess.objects.create(
        worker_id=worker_id,
        instance=uuid.uuid4(),
        host="a-host",
        pid=1,
        queues=[],
        concurrency=1,
        started_at=timezone.now() - datetime.timedelta(seconds=started_seconds_ago),
        heartbeat_seconds=10.0,
    )
    WorkerProcess.objects.filter(pk=worker_id).update(
        last_heartbeat_at=database_time_in(-beat_seconds_ago)
    )


@pytest.mark.parametrize(
    ("started_seconds_ago", "beat_seconds_ago", "taken_back"),
    [
        # It beats: its heartbeat passed over the job's locked row, and extends it when free.
        (60, 0, False),
        # Silent for over two heartbeats (HEARTBEAT_SECONDS: 10): killed, hung or cut off.
        (60, 25, True),
        # It beats, but started after the attempt: restarted under the same id.
        (-5, 0, True),
    ],
)
def test_an_expired_lease_of_a_worker_that_still_beats_is_left_to_it(
    settings, started_seconds_ago, beat_seconds_ago, taken_back
):
    settings.OUTBOX = {**settings.OUTBOX, "HEARTBEAT_SECONDS": 10, "LEASE_SECONDS": 60}
    job = tasks.noop.enqueue({})
    claim(worker_id="holder")
    expire(job.pk, attempts=1)
    registered("holder", started_seconds_ago=started_seconds_ago, beat_seconds_ago=beat_seconds_ago)
    assert rescue_expired_leases("default", history_limit=10) == int(taken_back)
    status = Job.objects.get(pk=job.pk).status
    assert status == (JobStatus.RETRYING if taken_back else JobStatus.RUNNING)


def expired_under_a_live_holder(settings):
    """A job claimed by worker "holder", its lease expired, while "holder" beats on; return
    the job and its claim."""
    settings.OUTBOX = {**settings.OUTBOX, "HEARTBEAT_SECONDS": 10, "LEASE_SECONDS": 60}
    job = tasks.noop.enqueue({})
    (claimed,) = claim(worker_id="holder")
    expire(job.pk, attempts=1)
    registered("holder", started_seconds_ago=60, beat_seconds_ago=0)
    return job, claimed


def test_an_expired_lease_its_live_holder_let_go_of_is_taken_back_by_it(settings):
    # The holder beats on, but its thread failed to record the job's outcome (the database
    # went away) and let the job go: no heartbeat extends the lease any more, and the others
    # leave the job to the live holder, so the holder itself must take it back.
    job, claimed = expired_under_a_live_holder(settings)
    assert rescue_expired_leases("default", history_limit=10) == 0
    other_token = uuid.uuid4()
    assert rescue_expired_leases("default", history_limit=10, abandoned_tokens=[other_token]) == 0
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    taken_back = rescue_expired_leases(
        "default", history_limit=10, abandoned_tokens=[other_token, claimed.lease_token]
    )
    assert taken_back == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.RETRYING


def test_an_expired_lease_its_live_holder_never_knew_of_is_taken_back_by_it(settings):
    # The holder's claim committed, but its answer was lost with the connection: the holder
    # beats on without the job, the others leave the job to it, so it must take it back.
    job, claimed = expired_under_a_live_holder(settings)
    assert rescue_expired_leases("default", history_limit=10, worker_id="another") == 0
    # The holder that holds it (its heartbeat passed over the locked row) leaves it.
    held = [claimed.lease_token]
    assert (
        rescue_expired_leases("default", history_limit=10, held_tokens=held, worker_id="holder")
        == 0
    )
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert rescue_expired_leases("default", history_limit=10, worker_id="holder") == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.RETRYING


def taken_back_by_a_worker(job_id, *, after, what):
    """Run a worker until ``after()`` is true (``what``) and then until job ``job_id`` is no
    longer running; return the job's row."""
    worker = Worker(concurrency=1)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(after, what=what)
        wait_until(
            lambda: Job.objects.get(pk=job_id).status != JobStatus.RUNNING,
            timeout=15,
            what="the job taken back",
        )
    finally:
        worker.request_stop()
        thread.join(10)
    return Job.objects.get(pk=job_id)


def test_a_worker_takes_back_the_jobs_of_a_claim_whose_answer_it_lost(settings, monkeypatch):
    # The claim commits, then the connection dies before its rows come back (a killed
    # connection, a server restarting): the worker sees an error and never holds the jobs. Found
    # by the MariaDB restart test under load: five jobs "running" under a live worker for good.
    from django.db import OperationalError, connection

    from django_outbox.db import queries_for

    settings.OUTBOX = {**settings.OUTBOX, "LEASE_SECONDS": 1, "HEARTBEAT_SECONDS": 0.2}
    job = tasks.noop.enqueue({})
    queries = queries_for(connection)
    real_claim = queries.claim
    lost: list[int] = []

    def answer_lost_once(*args, **kwargs):
        claimed = real_claim(*args, **kwargs)
        if claimed and not lost:
            lost.extend(each.id for each in claimed)
            raise OperationalError("Lost connection to server during query")
        return claimed

    monkeypatch.setattr(queries, "claim", answer_lost_once)
    row = taken_back_by_a_worker(job.pk, after=lambda: lost, what="the lost claim")
    assert lost == [job.pk]
    assert row.status in (JobStatus.RETRYING, JobStatus.READY, JobStatus.SUCCEEDED), row.status
    assert "Lease expired" in row.errors[0]["error"], row.errors


def test_a_worker_takes_back_a_job_whose_outcome_it_failed_to_record(settings, monkeypatch):
    # Recording the outcome fails (a database error at the wrong moment): the thread lets the
    # job go, and its lease expires. The worker still beats, so other workers leave the job to
    # it; it must take the job back itself rather than leave it "running" for as long as it
    # lives.
    from django.db import OperationalError

    from django_outbox.worker import loop as loop_module
    from django_outbox.worker.runner import run_job

    settings.OUTBOX = {**settings.OUTBOX, "LEASE_SECONDS": 1, "HEARTBEAT_SECONDS": 0.2}
    job = tasks.noop.enqueue({})
    real_run_job = run_job
    failures: list[int] = []

    def fails_once(claimed, **kwargs):
        if not failures:
            failures.append(claimed.id)
            raise OperationalError("database is locked")
        return real_run_job(claimed, **kwargs)

    monkeypatch.setattr(loop_module, "run_job", fails_once)
    row = taken_back_by_a_worker(job.pk, after=lambda: failures, what="the failed recording")
    assert failures == [job.pk]
    assert row.status in (JobStatus.RETRYING, JobStatus.READY, JobStatus.SUCCEEDED), row.status
    assert "Lease expired" in row.errors[0]["error"], row.errors


@pytest.mark.parametrize(
    "task",
    [tasks.deleted_while_running, tasks.atomic_deleted_while_running],
    ids=["non-atomic", "atomic"],
)
def test_a_job_deleted_while_it_ran_is_logged_as_deleted_not_as_taken_over(task, caplog):
    """An operator deleted the running job (the admin's delete): the worker records nothing,
    and its log says what happened rather than blame another worker."""
    job = task.enqueue({})
    with caplog.at_level(logging.WARNING, logger="django_outbox"):
        stats = run_worker()
    assert stats.outcomes == Counter({Outcome.LEASE_LOST: 1})
    assert not Job.objects.filter(pk=job.pk).exists()
    warnings = [
        record.getMessage() for record in caplog.records if "lease lost" in record.getMessage()
    ]
    assert len(warnings) == 1, caplog.text
    assert "was deleted while it ran" in warnings[0]
    assert "another worker" not in warnings[0]
