"""Fault injection: the database goes away under running workers (PostgreSQL, a server of the
test's own: backends killed, a restart, a stopped server)."""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.chaos.outcomes import report, ride_out_outage, scaled
from tests.chaos.private_postgresql import PrivatePostgreSQL, free_port, why_not
from tests.helpers import default_connection_on
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.process,
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True),
]

DATABASE = "outbox_private"


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
def private_server() -> Iterator[PrivatePostgreSQL]:
    """The test's default connection on a server of its own, migrated; put back afterwards.

    Never the machine's shared cluster: the suite's other legs and other checkouts use it at
    the same time."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    server = PrivatePostgreSQL(Path(tempfile.mkdtemp(prefix="outbox-restart-")), free_port())
    try:
        server.start()
        server.create_database(DATABASE)
        with default_connection_on(HOST="127.0.0.1", PORT=str(server.port), NAME=DATABASE):
            yield server
    finally:
        server.remove()


def test_workers_ride_out_killed_backends_a_restart_and_a_stopped_server(private_server, workers):
    jobs = scaled(2_000, 6_000)
    outage = scaled(3, 10)
    # Long enough a drain (about 10 s on 8 threads) that jobs run through every outage.
    payloads = [{"sleep": 0.04}] * (jobs // 2)
    atomic = [job.pk for job in tasks.chaos_atomic.enqueue_many(payloads)]
    non_atomic = [job.pk for job in tasks.chaos_non_atomic.enqueue_many(payloads)]
    env = {"OUTBOX_TEST_PREPARE_THRESHOLD": "5", "DATABASE_URL": private_server.url(DATABASE)}
    plain = workers("--concurrency", "4", "--prefetch", "10", **env)
    supervised = workers("--processes", "2", "--concurrency", "2", **env)
    wait_until(lambda: succeeded() > 100, timeout=30, what="the drain to start")

    killed = 0
    for _ in range(3):
        killed += terminate_other_backends()
        time.sleep(0.5)

    connection.close()
    private_server.restart()

    connection.close()
    figures = ride_out_outage(
        private_server.stop,
        private_server.start,
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
