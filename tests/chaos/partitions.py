"""A private PostgreSQL that a worker reaches only through a veth pair from a network
namespace, so that tests can cut the link or drop its packets (``ip netns``, ``tc netem``).

Needs root, ``ip``, ``tc`` and PostgreSQL's ``initdb``/``pg_ctl`` run as the ``postgres``
user; the fixture skips, saying why, where any is missing. The shared servers are never
touched: the instance has its own data directory and port, and is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import private_postgresql
from tests.helpers import REPO
from tests.processes import worker_env

# Names, addresses and port of this test process's own: two suites may run at once on one
# machine (two checkouts), and each must cut only its own link.
_ID = os.getpid() % 10_000
NAMESPACE = f"outbox-partition-{_ID}"
HOST_SIDE, NAMESPACE_SIDE = f"obx{_ID}h", f"obx{_ID}n"
_SUBNET = f"10.{200 + _ID // 250 % 50}.{_ID % 250}"
HOST_ADDRESS, NAMESPACE_ADDRESS = f"{_SUBNET}.1", f"{_SUBNET}.2"
# Above Linux's ephemeral ports (32768-60999): a client's connection can't hold it.
PORT = 61_000 + _ID % 4_000
DATABASE = "outbox_partition"


_run = private_postgresql.run


def _missing(*tools: str) -> str | None:
    for tool in tools:
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


@dataclass
class PartitionedDatabase:
    """The private PostgreSQL and the link to the namespace the partitioned worker runs in."""

    data: Path

    #: The database as the test process (and a worker outside the namespace) reaches it.
    local_url: str = f"postgres://postgres@127.0.0.1:{PORT}/{DATABASE}"
    #: The database as a worker in the namespace reaches it: through the veth pair only.
    remote_url: str = f"postgres://postgres@{HOST_ADDRESS}:{PORT}/{DATABASE}"
    prefix: tuple[str, ...] = ("ip", "netns", "exec", NAMESPACE)

    def env(self, url: str, **extra: str) -> dict[str, str]:
        return {"DATABASE_URL": url, "OUTBOX_TEST_DATABASE_NAME": DATABASE, **extra}

    def cut(self) -> None:
        """Take the link down: nothing passes, in either direction."""
        _run("ip", "link", "set", HOST_SIDE, "down")

    def drop(self) -> None:
        """Drop every packet, the link up: the half-open case, where nothing tells the worker.

        The server's address leaves the host's end of the link: the worker's packets still go
        out and arrive, and are dropped there as addressed to no one, without an answer; the
        server's own sends find no route. (A drop on the worker's own side, ``tc ... netem
        loss 100%`` or a queue of length 0, tells its kernel, which retries at once when the
        link is back rather than at the backed-off retransmission times of a lost peer.)
        """
        _run("ip", "addr", "del", f"{HOST_ADDRESS}/24", "dev", HOST_SIDE)

    def heal(self) -> None:
        _run("ip", "link", "set", HOST_SIDE, "up")
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", HOST_SIDE, check=False)

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.local_url, autocommit=True) as connection:
            cursor = connection.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def manage(self, *args: str) -> str:
        """Run ``manage.py ARGS`` against the private database; return its output."""
        result = subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=REPO,
            env={**worker_env(), **self.env(self.local_url)},
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout


@pytest.fixture(scope="module")
def partitioned_database() -> Iterator[PartitionedDatabase]:
    reason = private_postgresql.why_not() or _missing("ip", "tc")
    if reason:
        pytest.skip(reason)
    # A namespace left by an interrupted run goes first (its veth pair with it).
    _run("ip", "netns", "del", NAMESPACE, check=False)
    try:
        _run("ip", "netns", "add", NAMESPACE)
    except subprocess.CalledProcessError as error:
        pytest.skip(f"cannot create a network namespace: {error.stderr.strip()}")
    data = Path(tempfile.mkdtemp(prefix="outbox-partition-"))
    database = PartitionedDatabase(data=data)
    server: private_postgresql.PrivatePostgreSQL | None = None
    try:
        _run("ip", "link", "add", HOST_SIDE, "type", "veth", "peer", "name", NAMESPACE_SIDE)
        _run("ip", "link", "set", NAMESPACE_SIDE, "netns", NAMESPACE)
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", HOST_SIDE)
        _run("ip", "link", "set", HOST_SIDE, "up")
        _run(
            *database.prefix, "ip", "addr", "add", f"{NAMESPACE_ADDRESS}/24", "dev", NAMESPACE_SIDE
        )
        _run(*database.prefix, "ip", "link", "set", NAMESPACE_SIDE, "up")
        _run(*database.prefix, "ip", "link", "set", "lo", "up")
        server = private_postgresql.PrivatePostgreSQL(
            data, PORT, addresses=f"127.0.0.1,{HOST_ADDRESS}", trusted=f"{_SUBNET}.0/24"
        )
        server.start()
        server.create_database(DATABASE)
        database.manage("migrate", "--verbosity", "0")
        yield database
    finally:
        # Whatever state a failed test left the link in, the rest must still be cleaned up.
        with contextlib.suppress(subprocess.CalledProcessError):
            database.heal()
        if server is not None:
            server.remove()
        _run("ip", "netns", "del", NAMESPACE, check=False)
        _run("ip", "link", "del", HOST_SIDE, check=False)
        time.sleep(0.1)
        shutil.rmtree(data, ignore_errors=True)
