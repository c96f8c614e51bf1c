"""manage.py outbox_health: exit 0 when healthy, 1 when not, with a report (text or JSON)."""

from __future__ import annotations

import datetime
import io
import json
import subprocess
import sys
import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_outbox.db.base import application_name_of
from django_outbox.jobs.transitions import database_time_in
from django_outbox.models import Job, WorkerProcess
from django_outbox.worker.health import CLAIM, WorkerHealth
from django_outbox.worker.registration import STALE_MIN_SECONDS, Registration
from tests.helpers import REPO
from tests.processes import worker_env
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def health(*args: str) -> tuple[int, str]:
    """Run the command; return its exit status and what it printed."""
    out = io.StringIO()
    try:
        call_command("outbox_health", *args, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue() + str(error)
    return 0, out.getvalue()


def registered(worker_id: str, *, in_error_for: float | None = None, started_ago: float = 600):
    """Register a worker through the registry's own code, its health as given."""
    state = WorkerHealth(allowed_error_seconds=60, grace_seconds=120)
    if in_error_for is not None:
        state.clock = lambda: time.monotonic() - in_error_for  # its errors began that long ago
        state.failed(CLAIM, ConnectionError("claim timed out"))
        state.clock = time.monotonic
    registration = Registration(
        using="default",
        worker_id=worker_id,
        queues=[],
        concurrency=2,
        heartbeat_seconds=1.0,
        health=state,
        counts=lambda: (10, 1),
    )
    registration.started_at = timezone.now() - datetime.timedelta(seconds=started_ago)
    registration.beat()
    return registration


def test_healthy_without_workers_exits_0_and_reports_the_database():
    status, output = health()
    assert status == 0
    assert "outbox_health: healthy" in output
    assert "ok         database: reachable" in output
    assert "workers: 0 live (0 healthy, 0 late), 0 stale" in output


def test_requiring_workers_when_none_runs_exits_1():
    status, output = health("--require-workers", "1")
    assert status == 1
    assert "at least 1 healthy required" in output


def test_a_worker_in_error_longer_than_allowed_is_unhealthy():
    registered("fine")
    registered("erring", in_error_for=300)
    status, output = health("--require-workers", "1")
    assert status == 1
    assert "worker erring: in error for 30" in output
    assert "(allowed 60 s): ConnectionError: claim timed out" in output
    assert "workers: 2 live (1 healthy, 0 late), 0 stale" in output


def test_a_worker_in_error_within_the_allowed_time_or_the_grace_period_is_healthy():
    registered("briefly", in_error_for=10)
    registered("just-started", in_error_for=300, started_ago=30)
    status, output = health("--require-workers", "2")
    assert status == 0, output
    assert "2 live (2 healthy, 0 late)" in output


def test_a_stale_worker_is_a_warning_and_does_not_count_as_live():
    registered("dead")
    WorkerProcess.objects.filter(pk="dead").update(
        last_heartbeat_at=database_time_in(-(STALE_MIN_SECONDS + 5))
    )
    status, output = health()
    assert status == 0
    assert "warning    workers: 0 live (0 healthy, 0 late), 1 stale" in output
    status, output = health("--require-workers", "1")
    assert status == 1


def test_worker_id_checks_one_worker_or_the_processes_of_a_supervisor():
    assert health("--worker-id", "web-1")[0] == 1  # not registered
    registered("pod-7-1")
    registered("pod-7-2")
    registered("pod-70-1", in_error_for=300)
    status, output = health("--worker-id", "pod-7")
    assert status == 0, output
    assert "worker pod-7-1: working" in output
    assert "worker pod-7-2: working" in output
    assert "pod-70" not in output
    assert health("--worker-id", "pod-70")[0] == 1

    WorkerProcess.objects.filter(pk="pod-7-2").update(
        last_heartbeat_at=database_time_in(-(STALE_MIN_SECONDS + 5))
    )
    status, output = health("--worker-id", "pod-7")
    assert status == 1
    assert "worker pod-7-2: stale: no heartbeat for" in output


def test_json_output_lists_every_check():
    registered("w-1")
    status, output = health("--json")
    report = json.loads(output)
    assert status == 0
    assert report["healthy"] is True
    names = [check["name"] for check in report["checks"]]
    assert names[:2] == ["database", "workers"]
    assert report["checks"][1]["details"]["live"] == 1


def test_an_unreachable_database_exits_1(tmp_path):
    env = worker_env()
    if connection.vendor == "postgresql":
        env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/outbox"  # nothing listens there
    elif connection.vendor == "mysql":
        env["DATABASE_URL"] = "mysql://root@127.0.0.1:1/outbox"
    else:
        env["OUTBOX_TEST_DATABASE_NAME"] = str(tmp_path / "no-such-directory" / "db.sqlite3")
    result = subprocess.run(
        [sys.executable, "-m", "django", "outbox_health"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "unhealthy  database: unreachable: OperationalError" in result.stdout
    assert "workers" not in result.stdout


def test_the_exit_status_of_the_command_line():
    env = worker_env()
    command = [sys.executable, "-m", "django", "outbox_health"]
    ok = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    unhealthy = subprocess.run(
        [*command, "--require-workers", "3"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unhealthy.returncode == 1
    assert "Unhealthy: workers: 0 live" in unhealthy.stderr
    bad = subprocess.run(
        [*command, "--require-workers", "-1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "--require-workers" in bad.stderr


@pytest.mark.postgresql
def test_a_long_open_transaction_warns_or_makes_it_unhealthy(second_connection):
    with second_connection.cursor() as cursor:
        second_connection.set_autocommit(False)
        cursor.execute("SELECT txid_current()")
    try:
        time.sleep(1.2)
        status, output = health("--warn-transaction-age", "1")
        assert status == 0
        assert "warning    oldest transaction: open for 1 s" in output
        assert "keeps vacuum from removing dead jobs" in output
        status, output = health("--max-transaction-age", "1")
        assert status == 1
        assert "unhealthy  oldest transaction" in output
    finally:
        second_connection.rollback()
        second_connection.set_autocommit(True)
    status, output = health("--max-transaction-age", "1")
    assert status == 0, output


@pytest.mark.postgresql
def test_dead_tuples_in_the_job_table_warn_or_make_it_unhealthy(second_connection):
    tasks.noop.enqueue_many([{}] * 50)
    Job.objects.all().delete()
    # Statistics reach pg_stat_user_tables when a session flushes them.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 10
    while True:
        with second_connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'django_outbox_job'"
            )
            (dead,) = cursor.fetchone()
        if dead >= 50 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert dead >= 50
    status, output = health("--warn-dead-tuples", "10")
    assert status == 0
    assert "warning    dead tuples:" in output
    status, output = health("--max-dead-tuples", "10")
    assert status == 1
    assert "unhealthy  dead tuples" in output


def test_the_postgresql_checks_are_left_out_on_sqlite():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's report")
    status, output = health("--max-transaction-age", "0", "--max-dead-tuples", "1")
    assert status == 0
    assert "transaction" not in output
    assert "dead tuples" not in output


def test_a_worker_whose_heartbeat_is_late_is_a_warning():
    registered("w-late")
    # Beating every second, last seen 5 s ago: late, not yet stale.
    WorkerProcess.objects.filter(pk="w-late").update(last_heartbeat_at=database_time_in(-5))
    status, output = health()
    assert status == 0
    assert "warning    worker w-late: heartbeat late: 5 s ago (beats every 1 s)" in output
    assert "1 live (1 healthy, 1 late)" in output


@pytest.mark.postgresql
def test_a_late_worker_is_reported_with_the_lock_its_session_waits_for():
    psycopg = pytest.importorskip("psycopg")
    """The worker's connections are named after it: the report says what they wait for."""
    registered("w-stuck")
    WorkerProcess.objects.filter(pk="w-stuck").update(last_heartbeat_at=database_time_in(-5))
    job = tasks.noop.enqueue({})
    params = connection.get_connection_params()
    with psycopg.connect(**params) as holder, psycopg.connect(**params, autocommit=True) as stuck:
        holder.execute("SELECT id FROM django_outbox_job WHERE id = %s FOR UPDATE", [job.pk])
        name = application_name_of("w-stuck")
        stuck.execute("SELECT set_config('application_name', %s, false)", [name])
        waiting = threading.Thread(
            target=stuck.execute,
            args=("UPDATE django_outbox_job SET priority = 1 WHERE id = %s", [job.pk]),
        )
        waiting.start()
        try:
            deadline = time.monotonic() + 10
            while True:
                status, output = health()
                if "waits" in output or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            holder.rollback()
            waiting.join(10)
    assert status == 0
    assert "worker w-stuck: heartbeat late" in output
    assert "for a lock (Lock/transactionid, held by pid" in output
    assert "UPDATE django_outbox_job SET priority = 1" in output
