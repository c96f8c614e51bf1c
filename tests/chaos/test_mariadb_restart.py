"""Fault injection on MariaDB: killed connections and a server restart in the middle of a drain.

The restart is of a private server started for the test (its own data directory, port and
socket, from ``mariadb-install-db``): never the machine's shared server, which other suites use.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from django.db import connection

from tests.chaos.outcomes import report, ride_out_outage, scaled
from tests.helpers import default_connection_on
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = [pytest.mark.chaos, pytest.mark.process, pytest.mark.django_db(transaction=True)]

DATABASE = "outbox_private"


class PrivateServer:
    """A mariadbd of the test's own, on a free port of 127.0.0.1."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.data}",
                "--user=root",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        self.log = (self.directory / "mariadbd.err").open("ab")
        self.process = subprocess.Popen(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={self.data}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.directory / 'mariadbd.sock'}",
                f"--pid-file={self.directory / 'mariadbd.pid'}",
                "--user=root",
                # Root without a password from 127.0.0.1, as the shared server's tests connect.
                "--skip-grant-tables",
                "--innodb-buffer-pool-size=64M",
                "--max-connections=200",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        wait_until(self.answers, timeout=60, what="the private MariaDB server to answer")

    def answers(self) -> bool:
        return (
            subprocess.run(
                ["mariadb-admin", "--host=127.0.0.1", f"--port={self.port}", "--user=root", "ping"],
                capture_output=True,
                timeout=10,
                check=False,
            ).returncode
            == 0
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=120)
        self.process = None
        if self.log is not None:
            self.log.close()
            self.log = None

    def sql(self, statement: str) -> None:
        subprocess.run(
            ["mariadb", "--host=127.0.0.1", f"--port={self.port}", "--user=root", "-e", statement],
            check=True,
            capture_output=True,
            timeout=60,
        )


@pytest.fixture
def private_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    """The test's default connection on a private server, migrated; put back afterwards."""
    if connection.vendor != "mysql":
        pytest.skip("MariaDB's server restart")
    if not (shutil.which("mariadb-install-db") and shutil.which("mariadbd")):
        pytest.skip("needs mariadb-install-db and mariadbd (Debian's mariadb-server)")
    server = PrivateServer(tmp_path_factory.mktemp("mariadb"))
    server.start()
    server.sql(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4")
    try:
        with default_connection_on(HOST="127.0.0.1", PORT=str(server.port), NAME=DATABASE):
            yield server
    finally:
        server.stop()


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


def kill_other_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.PROCESSLIST "
            "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        ids = [row[0] for row in cursor.fetchall()]
        for thread_id in ids:
            try:
                cursor.execute(f"KILL {int(thread_id)}")
            except Exception:  # It ended meanwhile, or this connection did.
                connection.close()
                return len(ids)
    return len(ids)


def test_workers_ride_out_killed_connections_and_a_server_restart_mid_drain(
    private_mariadb, workers
):
    jobs = scaled(2_000, 6_000)
    outage = scaled(3, 10)
    payloads = [{"sleep": 0.04}] * (jobs // 2)
    atomic = [job.pk for job in tasks.chaos_atomic.enqueue_many(payloads)]
    non_atomic = [job.pk for job in tasks.chaos_non_atomic.enqueue_many(payloads)]
    private = {"DATABASE_URL": f"mysql://root@127.0.0.1:{private_mariadb.port}/{DATABASE}"}
    plain = workers("--concurrency", "4", "--prefetch", "10", **private)
    supervised = workers("--processes", "2", "--concurrency", "2", **private)
    wait_until(lambda: succeeded() > 100, timeout=60, what="the drain to start")

    killed = 0
    for _ in range(3):
        killed += kill_other_connections()
        time.sleep(0.5)

    connection.close()
    figures = ride_out_outage(
        private_mariadb.stop,
        private_mariadb.start,
        outage,
        atomic=atomic,
        non_atomic=non_atomic,
        workers=(plain, supervised),
        succeeded=succeeded,
        timeout=scaled(180, 400),
    )
    report(
        "mariadb-restart", connections_killed=killed, restarts=1, outage_s=outage, lost=0, **figures
    )
    for worker in (plain, supervised):
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.stderr
