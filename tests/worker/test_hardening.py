"""The worker outlives database errors, and bugs found by using it as operators do stay fixed."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import DatabaseError, connection, connections

from django_outbox.db import queries_for
from django_outbox.jobs.transitions import rescue_expired_leases
from django_outbox.models import Job, JobStatus
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note
from tests.worker.helpers import claim, expire

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=[None, 5], ids=["django-cursor", "prepared"])
def prepare_threshold(request: pytest.FixtureRequest) -> Iterator[int | None]:
    """On PostgreSQL, run the worker's statements both ways: through Django's cursor (the
    default) and prepared on psycopg's own cursor (``OPTIONS["prepare_threshold"]``)."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    options = connection.settings_dict.setdefault("OPTIONS", {})
    before = options.get("prepare_threshold", "unset")
    options["prepare_threshold"] = request.param
    connection.close()
    yield request.param
    if before == "unset":
        options.pop("prepare_threshold", None)
    else:
        options["prepare_threshold"] = before
    connection.close()


def test_driver_errors_reach_callers_as_django_database_errors():
    queries = queries_for(connection)
    with pytest.raises(DatabaseError) as caught:
        queries.execute(connection, "SELECT * FROM no_such_table", [])
    # Django's class, not sqlite3's or psycopg's: the worker's `except DatabaseError` sees it.
    assert type(caught.value).__module__ == "django.db.utils"


@pytest.mark.postgresql
def test_prepared_statements_errors_reach_callers_as_django_database_errors(prepare_threshold):
    queries = queries_for(connection)
    connection.ensure_connection()
    assert connection.connection.prepare_threshold == prepare_threshold
    with pytest.raises(DatabaseError) as caught:
        queries.execute(connection, "SELECT * FROM no_such_table", [])
    assert type(caught.value).__module__ == "django.db.utils"


def terminate_other_backends() -> int:
    """Kill every other session on the test database, as a restart or an operator would."""
    if connection.vendor == "mysql":
        return kill_other_connections()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (killed,) = cursor.fetchone()
    return int(killed)


@pytest.mark.postgresql
def test_the_worker_outlives_its_backends_being_terminated(
    prepare_threshold, worker_thread, caplog
):
    caplog.set_level(logging.INFO, logger="django_outbox")
    worker = worker_thread(concurrency=2, prefetch=4)
    tasks.noop.enqueue_many([{}] * 20)
    tasks.noop_non_atomic.enqueue_many([{}] * 20)
    wait_until(lambda: Job.objects.succeeded().count() == 40, timeout=20, what="first jobs")

    for _ in range(3):
        assert terminate_other_backends() > 0
        time.sleep(0.3)
    tasks.noop.enqueue_many([{}] * 20)
    tasks.noop_non_atomic.enqueue_many([{}] * 20)

    wait_until(lambda: Job.objects.succeeded().count() == 80, timeout=30, what="later jobs")
    assert not worker.stopping
    # Logged once a run per loop, not a traceback per try.
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) < 15, [record.getMessage() for record in errors]
    assert "works again" in caplog.text


def kill_other_connections() -> int:
    """MariaDB: ``KILL`` every other connection to the test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.PROCESSLIST "
            "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        ids = [row[0] for row in cursor.fetchall()]
        for thread_id in ids:
            with contextlib.suppress(DatabaseError):  # It ended meanwhile.
                cursor.execute(f"KILL {int(thread_id)}")
    return len(ids)


def test_the_worker_outlives_its_mariadb_connections_being_killed(worker_thread, caplog):
    """``KILL <id>`` ends a connection mid-claim, mid-handler or mid-completion: mysqlclient
    reports "server has gone away" or "Lost connection" on its next statement."""
    if connection.vendor != "mysql":
        pytest.skip("MariaDB's KILL")
    caplog.set_level(logging.INFO, logger="django_outbox")
    worker = worker_thread(concurrency=2, prefetch=4)
    tasks.noop.enqueue_many([{}] * 20)
    tasks.noop_non_atomic.enqueue_many([{}] * 20)
    wait_until(lambda: Job.objects.succeeded().count() == 40, timeout=20, what="first jobs")

    for _ in range(3):
        assert kill_other_connections() > 0
        time.sleep(0.3)
    tasks.noop.enqueue_many([{}] * 20)
    tasks.noop_non_atomic.enqueue_many([{}] * 20)

    wait_until(lambda: Job.objects.succeeded().count() == 80, timeout=30, what="later jobs")
    assert not worker.stopping
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) < 15, [record.getMessage() for record in errors]
    assert "works again" in caplog.text


@pytest.fixture
def short_busy_timeout() -> Iterator[None]:
    """SQLite connections give up waiting for the write lock after 0.2 s."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's single write lock")
    options = connection.settings_dict.setdefault("OPTIONS", {})
    before = options.get("timeout")
    options["timeout"] = 0.2
    connection.close()
    yield
    options["timeout"] = before
    connection.close()


@contextlib.contextmanager
def write_locked() -> Iterator[None]:
    """Hold SQLite's write lock from another connection until the block ends."""
    locker = connections.create_connection("default")
    locker.settings_dict = dict(connection.settings_dict)
    with locker.cursor() as cursor:
        cursor.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        with locker.cursor() as cursor:
            cursor.execute("ROLLBACK")
        locker.close()


def test_the_worker_outlives_a_database_locked_longer_than_its_busy_timeout(
    short_busy_timeout, worker_thread
):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's single write lock")
    job = tasks.noop.enqueue({})
    with write_locked():
        thread_count = threading.active_count()
        worker = worker_thread(concurrency=1)
        time.sleep(1.5)  # several claims meet "database is locked"
        assert threading.active_count() > thread_count
        assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=20)
    assert not worker.stopping


def test_a_failure_met_by_the_write_lock_is_recorded_once_the_lock_is_free(
    short_busy_timeout, worker_thread
):
    """The failure's short transaction meets "database is locked" (another connection holds
    the write lock past the busy timeout): it is written again until the lock is free, rather
    than left to the lease's expiry, which would cost the job an attempt it never made."""
    tasks.handler_started.clear()
    tasks.handler_may_finish.clear()
    job = tasks.fails_when_told.enqueue({})
    worker = worker_thread(concurrency=1)
    assert tasks.handler_started.wait(10)
    with write_locked():
        tasks.handler_may_finish.set()
        time.sleep(1.0)  # several writes of the failure meet "database is locked"
        assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.FAILED, timeout=15)
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 1
    assert [entry["error"] for entry in row.errors] == ["RuntimeError: failed when told"]
    assert not worker.stopping


@pytest.mark.parametrize("locked", ["before the worker starts", "while it claims"])
def test_a_stop_does_not_wait_out_the_busy_timeout_of_a_worker_blocked_by_the_write_lock(
    locked, worker_thread, caplog
):
    """While another transaction (on SQLite, a handler's) holds the write lock, the worker's
    first rescue and its claims wait for it; a stop request must end the worker in about a
    second, not after the busy timeout (20 s in these tests), and report no database error
    for the claim it gave up."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's single write lock")
    tasks.noop.enqueue({}, delay=3600)
    locker = connections.create_connection("default")
    locker.settings_dict = dict(connection.settings_dict)
    try:
        if locked == "while it claims":
            worker = worker_thread(concurrency=1)
            time.sleep(0.5)  # claiming, and finding nothing due
        with locker.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
        if locked == "before the worker starts":
            worker = worker_thread(concurrency=1)
        time.sleep(1.5)  # the worker now waits for the lock
        (thread,) = [thread for thread in threading.enumerate() if thread.name == "test-worker"]
        stopped_at = time.monotonic()
        worker.request_stop()
        thread.join(15)
        took = time.monotonic() - stopped_at
    finally:
        with locker.cursor() as cursor:
            cursor.execute("ROLLBACK")
        locker.close()
    assert took < 3, took
    assert "claiming jobs" not in caplog.text


def test_a_worker_restarted_under_the_same_id_takes_back_its_predecessors_jobs():
    job = tasks.noop.enqueue({})
    claim(worker_id="host-1")  # then host-1 was SIGKILLed, and restarted under its name
    expire(job.pk, attempts=1)

    run_worker(worker_id="host-1")

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)
    assert row.errors[0]["error"].startswith("Lease expired: worker host-1")


def test_the_rescue_skips_only_the_leases_the_caller_holds():
    mine, theirs = tasks.noop.enqueue({}), tasks.noop.enqueue({})
    claimed = {job.id: job for job in claim(worker_id="same-id")}
    expire(mine.pk, attempts=1)
    expire(theirs.pk, attempts=1)

    rescued = rescue_expired_leases(
        "default", history_limit=10, held_tokens=[claimed[mine.pk].lease_token]
    )

    assert rescued == 1
    assert Job.objects.get(pk=mine.pk).status == JobStatus.RUNNING
    assert Job.objects.get(pk=theirs.pk).status == JobStatus.RETRYING


def test_an_atomic_handler_that_swallows_a_database_error_fails_its_attempt():
    job = tasks.swallows_integrity_error.enqueue({})

    stats = run_worker()

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.FAILED, 2)
    assert row.last_error.startswith("BrokenTransactionError: The handler caught a database error")
    assert "transaction.atomic()" in row.last_error
    # Nothing of the attempts was kept, and the worker never reported a success.
    assert not Note.objects.filter(job_id=job.pk).exists()
    assert (
        sum(count for outcome, count in stats.outcomes.items() if outcome.value == "succeeded") == 0
    )


def test_an_atomic_handler_that_catches_the_error_in_a_savepoint_succeeds():
    job = tasks.catches_integrity_error_in_a_savepoint.enqueue({})
    run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert list(Note.objects.filter(job_id=job.pk).values_list("text", flat=True)) == ["kept"]


def test_a_job_of_an_unknown_task_retries_and_the_log_names_the_deploy_order(caplog):
    caplog.set_level(logging.ERROR, logger="django_outbox")
    job = Job.objects.create(
        task_name="billing.tasks.added_in_the_next_release", queue="default", max_attempts=2
    )

    run_worker()

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.FAILED, 2)
    assert "No task named 'billing.tasks.added_in_the_next_release'" in row.last_error
    assert "deploy workers first" in caplog.text
    assert (
        f"job={job.pk} task=billing.tasks.added_in_the_next_release queue=default attempt=1 "
        in caplog.text
    )
    assert "max_attempts=2" in caplog.text


def test_a_claimable_row_with_its_attempts_used_up_gets_one_more_attempt():
    """A row edited by hand (or imported) to ready with attempts == max_attempts must not make
    every claim fail on the attempts-within-max constraint."""
    poison = tasks.noop.enqueue({})
    Job.objects.filter(pk=poison.pk).update(attempts=3, max_attempts=3)
    others = tasks.noop.enqueue_many([{}] * 5)

    run_worker()

    row = Job.objects.get(pk=poison.pk)
    assert (row.status, row.attempts, row.max_attempts) == (JobStatus.SUCCEEDED, 4, 4)
    assert Job.objects.filter(pk__in=[job.pk for job in others]).succeeded().count() == 5
