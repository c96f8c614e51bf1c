"""Helpers for tests that run ``manage.py run_outbox_worker`` as a subprocess."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NamedTuple

import pytest
from django.db import connection

from tests.helpers import REPO


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for a worker subprocess that uses the suite's test database."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        OUTBOX_TEST_DATABASE_NAME=str(connection.settings_dict["NAME"]),
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "bench")]),
        PYTHONUNBUFFERED="1",
        # A worker process that dies of a signal (SIGSEGV, SIGBUS) prints its threads' stacks.
        PYTHONFAULTHANDLER="1",
        OUTBOX_TEST_PARENT_PID=str(os.getpid()),
    )
    env.update(extra)
    return env


#: Whether the running test may start worker processes: only tests marked ``process`` (or
#: ``chaos``) may, so that every other test of a wing runs in this process alone. The root
#: conftest sets it for each test.
allowed = False


def start_worker_process(
    *args: str, prefix: tuple[str, ...] = (), **env: str
) -> subprocess.Popen[str]:
    """Start ``manage.py run_outbox_worker ARGS`` against the test database (run by the command
    ``prefix``, if any: ``ip netns exec NAME``, say)."""
    if not allowed:
        raise RuntimeError(
            "This test starts worker processes: mark it @pytest.mark.process (the unit tests "
            "of a wing run in the test's own process)."
        )
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "django", "run_outbox_worker", *args],
        cwd=REPO,
        env=worker_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A process group of its own, as under systemd: tests can signal the whole group.
        start_new_session=True,
    )


#: Settings for a worker whose lease expires soon after it dies, so its jobs are rescued fast.
SHORT_LEASE = {"OUTBOX_TEST_LEASE_SECONDS": "2", "OUTBOX_TEST_HEARTBEAT_SECONDS": "0.5"}


def _drain(stream: IO[str], lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


class WorkerProcess:
    """A worker subprocess whose output is read as it comes: a full pipe would stall it."""

    def __init__(self, *args: str, prefix: tuple[str, ...] = (), **env: str) -> None:
        self.popen = start_worker_process(*args, prefix=prefix, **env)
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=_drain, args=(self.popen.stdout, self._stdout), daemon=True),
            threading.Thread(target=_drain, args=(self.popen.stderr, self._stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stdout(self) -> str:
        return "".join(self._stdout)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def send(self, signum: signal.Signals) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """Return the exit code; fail the test if the process still runs after ``timeout``."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.pid} still running after {timeout}s; stderr:\n{self.stderr}")
        for reader, stream in zip(
            self._readers, (self.popen.stdout, self.popen.stderr), strict=True
        ):
            reader.join(timeout=5)
            # A reader still blocked (a grandchild holds the pipe open) owns the stream's lock:
            # closing it would wait for that reader forever.
            if stream is not None and not reader.is_alive():
                stream.close()
        return code

    def wait_for_output(self, text: str, timeout: float = 15) -> None:
        """Wait until ``text`` appears on stderr (where the worker logs)."""
        wait_until(
            lambda: text in self.stderr or self.popen.poll() is not None,
            timeout,
            f"{text!r} on the stderr of worker {self.pid}",
        )
        assert text in self.stderr, f"worker {self.pid} exited early; stderr:\n{self.stderr}"

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.wait(timeout=10)


@contextmanager
def worker_processes() -> Iterator[Callable[..., WorkerProcess]]:
    """Yield a function starting worker processes; kill those still running at the end."""
    started: list[WorkerProcess] = []

    def start(*args: str, prefix: tuple[str, ...] = (), **env: str) -> WorkerProcess:
        process = WorkerProcess(*args, prefix=prefix, **env)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill()


def wait_until(
    condition: Callable[[], object], timeout: float = 10, what: str = "the condition"
) -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Run(NamedTuple):
    """One line of record_run's log: a handler run."""

    job_id: int
    attempt: int
    pid: int


def read_runs(log: Path) -> list[Run]:
    if not log.exists():
        return []
    text = log.read_text()
    # A line still being written (read while a worker appends it) is the last, unfinished one.
    whole = text[: text.rfind("\n") + 1]
    return [Run(*map(int, line.split())) for line in whole.splitlines()]


def runs_per_job(log: Path) -> Counter[int]:
    return Counter(run.job_id for run in read_runs(log))


#: The supervisor's log line for each worker process it starts.
STARTED = re.compile(r"started worker process number=(\d+) pid=(\d+)")


def child_pids(worker) -> dict[int, int]:
    """Worker process number -> its latest pid, from the supervisor's log."""
    return {int(number): int(pid) for number, pid in STARTED.findall(worker.stderr)}


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by a dead parent's successor) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
