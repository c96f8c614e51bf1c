"""Fault injection: the database goes away under running workers (PostgreSQL)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.chaos.outcomes import report, ride_out_outage, scaled
from tests.helpers import REPO
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.process,
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True),
]


def cluster(action: str) -> None:
    """Start, stop or restart the machine's PostgreSQL cluster (as CI and developers run it)."""
    version = sorted(path.name for path in Path("/etc/postgresql").iterdir())[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action],
        check=True,
        capture_output=True,
        timeout=60,
    )


def query_when_back(sql: str) -> int:
    """Run ``sql`` on the test's own connection, reconnecting while the server is away."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql)
                return int(cursor.fetchone()[0])
        except Exception:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def succeeded() -> int:
    return query_when_back("SELECT count(*) FROM django_outbox_job WHERE status = 'succeeded'")


def terminate_other_backends() -> int:
    return query_when_back(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )


@pytest.fixture
def restartable_cluster():
    if not shutil.which("pg_ctlcluster") or not Path("/etc/postgresql").is_dir():
        pytest.skip("needs the machine's own PostgreSQL cluster (pg_ctlcluster)")
    yield
    # Whatever happened, leave the server running for the rest of the suite.
    subprocess.run(
        ["bash", str(REPO / ".ci" / "ensure-postgres")],
        check=False,
        timeout=60,
    )
    connection.close()


def test_workers_ride_out_killed_backends_a_restart_and_a_stopped_server(
    restartable_cluster, workers
):
    jobs = scaled(2_000, 6_000)
    outage = scaled(3, 10)
    # Long enough a drain (about 10 s on 8 threads) that jobs run through every outage.
    payloads = [{"sleep": 0.04}] * (jobs // 2)
    atomic = [job.pk for job in tasks.chaos_atomic.enqueue_many(payloads)]
    non_atomic = [job.pk for job in tasks.chaos_non_atomic.enqueue_many(payloads)]
    env = {"OUTBOX_TEST_PREPARE_THRESHOLD": "5"}
    plain = workers("--concurrency", "4", "--prefetch", "10", **env)
    supervised = workers("--processes", "2", "--concurrency", "2", **env)
    wait_until(lambda: succeeded() > 100, timeout=30, what="the drain to start")

    killed = 0
    for _ in range(3):
        killed += terminate_other_backends()
        time.sleep(0.5)

    connection.close()
    cluster("restart")

    connection.close()
    figures = ride_out_outage(
        lambda: cluster("stop"),
        lambda: cluster("start"),
        outage,
        atomic=atomic,
        non_atomic=non_atomic,
        workers=(plain, supervised),
        succeeded=succeeded,
        timeout=scaled(120, 300),
    )
    report("database", backends_killed=killed, restarts=1, outage_s=outage, lost=0, **figures)
    for worker in (plain, supervised):
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.stderr
