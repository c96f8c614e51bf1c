"""The suite's own hygiene: worker processes it starts end with the pytest that started them."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.processes import WorkerProcess

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_a_worker_process_ends_when_the_process_that_started_it_is_gone():
    # A stand-in for pytest: a process the test can kill, named as the worker's parent.
    stand_in = subprocess.Popen(["sleep", "60"])
    worker = WorkerProcess(OUTBOX_TEST_PARENT_PID=str(stand_in.pid))
    try:
        worker.wait_for_output("worker started")
        assert worker.popen.poll() is None
        stand_in.kill()
        stand_in.wait()
        assert worker.wait(timeout=15) == -signal.SIGKILL
    finally:
        stand_in.kill()
        if worker.popen.poll() is None:
            worker.popen.kill()
            worker.popen.wait()
