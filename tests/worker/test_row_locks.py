"""A row lock held by another transaction holds back only its own job, never the worker.

An operator's ``SELECT ... FOR UPDATE`` in psql, or an application's long transaction around
``cancel()``, locks a job's row while a worker runs the job. PostgreSQL and MariaDB: SQLite
has no row locks (its one write lock is bounded by the busy timeout).
"""

import time
from collections import Counter

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

import django_outbox
from django_outbox.db import queries_for
from django_outbox.jobs.transitions import rescue_expired_leases
from django_outbox.models import Job, JobStatus, WorkerProcess
from django_outbox.stats.probes import check_health
from django_outbox.worker.runner import Outcome
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note
from tests.worker.helpers import lease_of, row_locked

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.row_locks]


@pytest.fixture
def short_leases(settings):
    settings.OUTBOX = {**settings.OUTBOX, "LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 0.2}
    tasks.handler_started.clear()
    tasks.handler_may_finish.clear()
    tasks.lease_lost_seen.clear()
    yield
    tasks.handler_may_finish.set()


def test_a_locked_row_holds_back_no_other_lease(short_leases, worker_thread):
    locked, other = (tasks.waits_for_test_non_atomic.enqueue({}) for _ in range(2))
    worker = worker_thread(concurrency=2)
    wait_until(lambda: len(worker.held.running()) == 2)
    with row_locked(locked.pk):
        # Past the lease: the other job's lease goes on being extended meanwhile.
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert lease_of(other.pk) > timezone.now()
            time.sleep(0.2)
        assert lease_of(locked.pk) < timezone.now()
        # The locked job is still this worker's: its lease is not counted as lost.
        assert not any(job.lease_lost for job in worker.held.all())
    # Free again: its lease is extended at the next beat.
    wait_until(lambda: lease_of(locked.pk) > timezone.now())
    tasks.handler_may_finish.set()
    wait_until(lambda: worker.stats.outcomes[Outcome.SUCCEEDED] == 2)
    assert tasks.lease_lost_seen == [False, False]
    assert set(Job.objects.values_list("status", "attempts")) == {(JobStatus.SUCCEEDED, 1)}


def test_a_job_whose_row_stays_locked_past_its_lease_is_reported(
    short_leases, worker_thread, caplog
):
    job = tasks.waits_for_test_non_atomic.enqueue({})
    worker = worker_thread(concurrency=1)
    wait_until(lambda: len(worker.held.running()) == 1)
    with row_locked(job.pk):
        wait_until(lambda: "lease expired while its row was locked" in caplog.text, timeout=10)
        error, _ago = worker.health.last_error()
        assert f"Job {job.pk}'s row has been locked by another transaction" in error
        # Not a database error of the worker's: restarting it would not free the row.
        assert worker.health.in_error_for() is None
    wait_until(lambda: "row free again" in caplog.text)
    assert lease_of(job.pk) > timezone.now()
    tasks.handler_may_finish.set()
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    assert tasks.lease_lost_seen == [False]


def test_cancel_inside_a_long_transaction_ends_the_attempt_cancelled_at_commit(
    short_leases, worker_thread
):
    job = tasks.waits_for_test.enqueue({})
    later = tasks.noop.using(delay=1).enqueue({})
    worker = worker_thread(concurrency=2)
    wait_until(lambda: len(worker.held.running()) == 1)
    with transaction.atomic():
        assert django_outbox.cancel(job) == django_outbox.Cancellation.REQUESTED
        # The handler returns while the request is not yet committed: its success mark waits
        # for the row, and the rest of the worker goes on.
        tasks.handler_may_finish.set()
        wait_until(lambda: Job.objects.get(pk=later.pk).status == JobStatus.SUCCEEDED)
        time.sleep(1)
        assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED)
    row = Job.objects.get(pk=job.pk)
    assert row.errors[-1]["event"] == "cancelled"
    assert "cancel() was requested during this attempt" in row.errors[-1]["error"]
    assert "its writes were rolled back" in row.errors[-1]["error"]
    assert not Note.objects.filter(job_id=job.pk).exists()
    wait_until(lambda: worker.stats.outcomes[Outcome.CANCELLED] == 1)


def test_a_cancel_committed_before_the_completer_marks_the_job_ends_it_cancelled(
    short_leases, worker_thread
):
    job = tasks.waits_for_test_non_atomic.enqueue({})
    worker = worker_thread(concurrency=1)
    wait_until(lambda: len(worker.held.running()) == 1)
    with transaction.atomic():
        assert django_outbox.cancel(job) == django_outbox.Cancellation.REQUESTED
        tasks.handler_may_finish.set()
        # The completer passes over the locked row, and tries it again later.
        wait_until(lambda: not worker.held.running())
        time.sleep(0.5)
        assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED)
    row = Job.objects.get(pk=job.pk)
    assert row.errors[-1]["event"] == "cancelled"
    assert row.errors[-1]["error"].endswith("its effects stand.")


def test_a_row_locked_for_a_moment_is_marked_as_soon_as_it_is_free(short_leases, worker_thread):
    """Another worker's claim locks the rows its scan passes over (claimed meanwhile by this
    worker) until it commits: the completer tries them again within milliseconds, not after
    its retry interval, while their jobs hold this worker's places."""
    job = tasks.waits_for_test_non_atomic.enqueue({})
    worker = worker_thread(concurrency=1)
    wait_until(lambda: len(worker.held.running()) == 1)
    # Longer than this test waits: only a prompt retry marks the job in time.
    worker._completer.retry_seconds = 60
    with row_locked(job.pk):
        tasks.handler_may_finish.set()
        wait_until(lambda: worker._completer._rows_locked)
        assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    # Its place is free once the mark is reported, just after its commit.
    wait_until(worker.held.is_empty)


def test_a_lease_that_ran_out_while_its_row_was_locked_is_not_taken_back(
    short_leases, worker_thread
):
    job = tasks.waits_for_test_non_atomic.enqueue({})
    worker = worker_thread(concurrency=1)
    wait_until(lambda: len(worker.held.running()) == 1)
    with row_locked(job.pk):
        wait_until(lambda: lease_of(job.pk) < timezone.now(), timeout=10)
    # Another worker's heartbeat, at once after the lock went: the holder still beats.
    assert rescue_expired_leases("default", history_limit=10) == 0
    tasks.handler_may_finish.set()
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    assert tasks.lease_lost_seen == [False]
    assert Job.objects.get(pk=job.pk).attempts == 1


@pytest.mark.postgresql
def test_a_worker_stuck_on_a_lock_from_its_start_is_registered_and_reported_late(
    short_leases, worker_thread
):
    """Held up before its first claim (a migration holds the job table), the worker is in the
    registry all the same, and outbox_health tells that its heartbeat is late."""
    params = connection.get_connection_params()
    with psycopg.connect(**params) as migration:
        migration.execute(f"LOCK TABLE {Job._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        worker = worker_thread(concurrency=1)
        wait_until(lambda: WorkerProcess.objects.filter(pk=worker.worker_id).exists())
        # Every statement of the worker on the job table gives up after a second and backs
        # off; its heartbeat, which extends leases first, cannot write its row meanwhile.
        wait_until(
            lambda: any("heartbeat late" in check.message for check in check_health().checks),
            timeout=15,
        )
        migration.rollback()
    wait_until(lambda: not any(c.status != "ok" for c in check_health().checks), timeout=15)


def test_a_burst_worker_does_not_leave_a_job_whose_row_was_locked_for_a_moment(monkeypatch):
    # The claim passes over rows another transaction holds (SKIP LOCKED): a burst worker took
    # its empty claim for an empty queue and exited, the job left due. A retry left due by its
    # own burst was seen so, under load (the Django tasks backend's retry test, in CI).
    job = tasks.noop.enqueue({})
    queries = queries_for(connection)
    claim = queries.claim
    found: list[int] = []

    with row_locked(job.pk) as holder:

        def claim_then_release(*args, **kwargs):
            jobs = claim(*args, **kwargs)
            found.append(len(jobs))
            holder.rollback()  # the lock was held for the first claim only
            return jobs

        monkeypatch.setattr(queries, "claim", claim_then_release)
        stats = run_worker()

    assert found[0] == 0  # the first claim passed over the locked row
    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 1})
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
