"""A PostgreSQL server of a test's own, for the tests that stop, restart or cut off the server.

Its own data directory, port and socket, made by ``initdb`` and run by ``pg_ctl`` as the
``postgres`` user: the machine's shared cluster, which the suite's other legs and other
checkouts use at the same time, is never touched. Needs root (to run as ``postgres``),
``su``, ``initdb`` and ``pg_ctl``; ``why_not()`` says which is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)


def as_postgres(command: str) -> None:
    run("su", "postgres", "-s", "/bin/sh", "-c", command)


def why_not() -> str | None:
    """Why a private server can't be made here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (to run initdb and pg_ctl as postgres)"
    for tool in ("su", "initdb", "pg_ctl", "psql"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivatePostgreSQL:
    """A cluster in ``directory`` listening on ``port`` at ``addresses`` (and a socket there).

    ``trusted``: a network (``10.1.2.0/24``) whose clients it trusts besides localhost's.
    """

    def __init__(
        self,
        directory: Path,
        port: int,
        *,
        addresses: str = "127.0.0.1",
        trusted: str | None = None,
    ) -> None:
        self.directory = directory
        self.cluster = directory / "cluster"
        self.port = port
        self.addresses = addresses
        shutil.chown(directory, "postgres", "postgres")
        as_postgres(f"initdb -D {self.cluster} -A trust -U postgres --no-sync >/dev/null")
        if trusted:
            with (self.cluster / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {trusted} trust\n")

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        # fsync off: the tests stop the server, they don't crash the machine.
        as_postgres(
            f"pg_ctl -D {self.cluster} -l {self.directory}/server.log -w -o "
            f"\"-p {self.port} -k {self.directory} -c listen_addresses='{self.addresses}' "
            '-c fsync=off -c max_connections=200" start >/dev/null'
        )

    def stop(self, mode: str = "fast") -> None:
        as_postgres(f"pg_ctl -D {self.cluster} -m {mode} -w stop >/dev/null")

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        """Stop the server whatever its state, and delete its files."""
        as_postgres(f"pg_ctl -D {self.cluster} -m immediate stop >/dev/null 2>&1 || true")
        shutil.rmtree(self.directory, ignore_errors=True)

    def create_database(self, name: str) -> None:
        """Create ``name``, retrying while the new server can't take it yet."""
        deadline = time.monotonic() + 30
        while True:
            result = run("psql", self.url("postgres"), "-c", f"CREATE DATABASE {name}", check=False)
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                log = (self.directory / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"cannot create {name}: {result.stderr}\nserver log:\n{log}")
            time.sleep(0.5)
