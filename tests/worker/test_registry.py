"""Workers register themselves, heartbeat into the registry, and leave it when they stop."""

from __future__ import annotations

import datetime
import logging
import os
import signal
import socket
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from django_outbox.jobs.transitions import database_time_in
from django_outbox.models import Job, WorkerProcess
from django_outbox.worker.health import WorkerHealth
from django_outbox.worker.registration import (
    FORGET_SECONDS,
    STALE_MIN_SECONDS,
    Registration,
    forget_silent_workers,
    registered_workers,
)
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def registration(worker_id: str = "w-1", **options: object) -> Registration:
    health = WorkerHealth(allowed_error_seconds=60, grace_seconds=0)
    defaults: dict[str, object] = {
        "using": "default",
        "worker_id": worker_id,
        "queues": ["emails"],
        "concurrency": 3,
        "heartbeat_seconds": 1.0,
        "health": health,
        "counts": lambda: (7, 2),
    }
    return Registration(**{**defaults, **options})  # type: ignore[arg-type]


def stale_row(worker_id: str, silent_for: float, **fields: object) -> WorkerProcess:
    """A row as a worker killed ``silent_for`` seconds ago left it."""
    row = WorkerProcess.objects.create(
        worker_id=worker_id,
        instance=uuid.uuid4(),
        host="old-host",
        pid=1,
        queues=[],
        concurrency=1,
        started_at=timezone.now() - datetime.timedelta(seconds=silent_for + 60),
        heartbeat_seconds=1.0,
        **fields,
    )
    WorkerProcess.objects.filter(pk=worker_id).update(
        last_heartbeat_at=database_time_in(-silent_for)
    )
    row.refresh_from_db()
    return row


def test_a_running_worker_is_registered_with_its_host_pid_queues_and_threads(worker_thread):
    worker = worker_thread(queues=["emails", "default"], concurrency=3, worker_id="reg-1")
    wait_until(lambda: WorkerProcess.objects.filter(pk="reg-1").exists(), what="registration")

    row = WorkerProcess.objects.get(pk="reg-1")
    assert (row.host, row.pid, row.queues, row.concurrency) == (
        socket.gethostname(),
        os.getpid(),
        ["emails", "default"],
        3,
    )
    assert row.instance == worker._registration.instance
    assert row.in_error_since is None
    [registered] = registered_workers()
    assert not registered.stale
    assert registered.healthy


def test_the_heartbeat_writes_the_jobs_done_and_failed_counted_in_memory(worker_thread):
    for _ in range(3):
        tasks.noop.enqueue({})
    tasks.always_fails.enqueue({})  # three attempts, each a failure
    worker_thread(worker_id="reg-2")
    wait_until(lambda: not Job.objects.unfinished().exists(), what="the jobs to finish")

    # Written by a later heartbeat (one a second in the tests' settings), not per job.
    wait_until(
        lambda: WorkerProcess.objects.filter(pk="reg-2", jobs_done=6, jobs_failed=3).exists(),
        what="the counts in the registry",
    )
    first = WorkerProcess.objects.get(pk="reg-2").last_heartbeat_at
    wait_until(
        lambda: WorkerProcess.objects.get(pk="reg-2").last_heartbeat_at > first,
        what="another heartbeat",
    )


def test_a_worker_that_stops_gracefully_leaves_the_registry(worker_thread):
    worker = worker_thread(worker_id="leaving")
    wait_until(lambda: WorkerProcess.objects.filter(pk="leaving").exists(), what="registration")
    worker.request_stop()
    wait_until(lambda: not WorkerProcess.objects.filter(pk="leaving").exists(), what="its leave")


def test_a_worker_restarted_under_the_same_id_takes_the_dead_ones_row_over(worker_thread):
    stale_row("same-id", silent_for=120, jobs_done=500)

    worker = worker_thread(worker_id="same-id")
    wait_until(
        lambda: WorkerProcess.objects.get(pk="same-id").instance == worker._registration.instance,
        what="the takeover",
    )
    row = WorkerProcess.objects.get(pk="same-id")
    assert (row.host, row.pid, row.jobs_done) == (socket.gethostname(), os.getpid(), 0)
    assert not registered_workers()[0].stale


def test_an_older_worker_with_the_same_id_neither_takes_the_row_back_nor_deletes_it(caplog):
    older = registration("twin")
    newer = registration("twin")
    newer.started_at = older.started_at + datetime.timedelta(seconds=5)
    older.beat()
    newer.beat()
    assert WorkerProcess.objects.get(pk="twin").instance == newer.instance

    with caplog.at_level(logging.WARNING, logger="django_outbox.worker.registration"):
        older.beat()
        older.leave()
    assert WorkerProcess.objects.get(pk="twin").instance == newer.instance
    assert "another worker registered with the same id worker=twin" in caplog.text

    newer.leave()
    assert not WorkerProcess.objects.exists()


def test_a_worker_whose_heartbeat_stopped_is_stale_and_other_workers_forget_it_later():
    stale_row("quiet", silent_for=STALE_MIN_SECONDS + 10)
    stale_row("gone", silent_for=FORGET_SECONDS + 60)
    states = {
        worker.row.worker_id: (worker.stale, worker.healthy) for worker in registered_workers()
    }
    assert states == {"gone": (True, False), "quiet": (True, False)}

    # Another worker's heartbeat deletes the rows silent for more than FORGET_SECONDS.
    registration("alive").beat()
    stale = {worker.row.worker_id: worker.stale for worker in registered_workers()}
    assert stale == {"alive": False, "quiet": True}

    stale_row("gone-too", silent_for=FORGET_SECONDS + 60)
    assert forget_silent_workers("default") == 1
    assert set(WorkerProcess.objects.values_list("pk", flat=True)) == {"alive", "quiet"}


def test_a_beat_writes_the_workers_error_state():
    health = WorkerHealth(allowed_error_seconds=60, grace_seconds=0)
    worker = registration("erring", health=health)
    health.failed("claim", RuntimeError("could not claim\nsecond line"))
    worker.beat()

    row = WorkerProcess.objects.get(pk="erring")
    assert row.in_error_since is not None
    assert row.last_error_at is not None
    assert row.last_error == "RuntimeError: could not claim"
    [registered] = registered_workers()
    assert registered.in_error_for is not None
    assert 0 <= registered.in_error_for < 30

    health.succeeded("claim")
    worker.beat()
    row.refresh_from_db()
    assert row.in_error_since is None
    assert row.last_error == "RuntimeError: could not claim"


def test_a_missing_registry_table_never_stops_a_worker_from_running_jobs(caplog, worker_thread):
    # An operator upgraded the package and forgot to migrate: every registry write fails.
    with connection.schema_editor() as editor:
        editor.delete_model(WorkerProcess)
    try:
        with caplog.at_level(logging.WARNING, logger="django_outbox.worker.registration"):
            worker = worker_thread(worker_id="no-table")
            wait_until(
                lambda: "registering the worker worker=no-table failed" in caplog.text,
                what="a failed heartbeat's registration",
            )
            jobs = [tasks.noop.enqueue({}) for _ in range(5)]
            wait_until(
                lambda: (
                    Job.objects.succeeded().filter(pk__in=[job.pk for job in jobs]).count() == 5
                ),
                what="the jobs to run",
            )
            worker.request_stop()
            wait_until(lambda: "could not remove the worker" in caplog.text, what="its leave")
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(WorkerProcess)
    assert not worker.health.in_error_for()


@pytest.mark.process
def test_a_worker_process_registers_and_leaves_on_sigterm(workers):
    worker = workers("--worker-id", "proc-1")
    wait_until(lambda: WorkerProcess.objects.filter(pk="proc-1").exists(), timeout=30)
    assert WorkerProcess.objects.get(pk="proc-1").pid == worker.pid

    worker.send(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.stderr
    assert not WorkerProcess.objects.filter(pk="proc-1").exists()


@pytest.mark.process
def test_a_killed_worker_leaves_its_row_and_its_restart_under_the_same_id_takes_it(workers):
    first = workers("--worker-id", "proc-2")
    wait_until(lambda: WorkerProcess.objects.filter(pk="proc-2").exists(), timeout=30)
    first.send(signal.SIGKILL)
    first.wait(timeout=10)
    assert WorkerProcess.objects.get(pk="proc-2").pid == first.pid

    second = workers("--worker-id", "proc-2")
    wait_until(
        lambda: WorkerProcess.objects.get(pk="proc-2").pid == second.pid,
        timeout=30,
        what="the restarted worker's row",
    )
    second.send(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, second.stderr
    assert not WorkerProcess.objects.exists()


@pytest.mark.process
def test_each_process_of_a_supervisor_registers_under_its_own_id(workers):
    supervisor = workers("--processes", "2", "--worker-id", "sup")
    wait_until(lambda: WorkerProcess.objects.count() == 2, timeout=60, what="two workers")
    assert set(WorkerProcess.objects.values_list("pk", flat=True)) == {"sup-1", "sup-2"}

    supervisor.send(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0, supervisor.stderr
    assert not WorkerProcess.objects.exists()
