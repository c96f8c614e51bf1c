# Adapted from django-tasks-db 0.13.0, tests/tests.py (DatabaseWorkerProcessTestCase).
# Copyright (c) Jake Howard and individual contributors. BSD 3-clause license: see LICENSE.
# Changes for OutboxBackend are marked "outbox:". The reference starts its db_worker command;
# these start run_outbox_worker.
import signal
import subprocess
import sys
import time
from typing import Any
from unittest import skipIf

import pytest
from django.test import TransactionTestCase
from django.utils.crypto import get_random_string

from django_outbox.apps import uses_task_backend
from django_outbox.models import WorkerProcess
from tests.processes import worker_env

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
    ),
]

if uses_task_backend():
    try:
        from django.tasks import TaskResultStatus, default_task_backend
    except ImportError:
        from django_tasks import (  # type: ignore[assignment,no-redef,unused-ignore]
            TaskResultStatus,
            default_task_backend,
        )

    from tests.django_tasks.reference import tasks as test_tasks


class DatabaseWorkerProcessTestCase(TransactionTestCase):
    # outbox: 1 s is too short for a worker process to start on a loaded CI machine (Django's
    # set-up and system checks): where the reference sleeps that long for a task to be running
    # (or the worker to be up), these wait until it is, up to a minute. The tasks that must
    # outlast the start run longer to match.
    WORKER_STARTUP_TIME = 4

    def wait_until_running(self, result: Any) -> None:
        """outbox: wait until the worker process runs ``result``'s task (or is up, with None)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if result is None:
                if WorkerProcess.objects.exists():
                    return
            else:
                result.refresh()
                if result.status == TaskResultStatus.RUNNING:
                    return
            time.sleep(0.1)
        self.fail("the worker process did not start in 60 s")

    def setUp(self) -> None:
        self.processes: list[subprocess.Popen] = []

    def tearDown(self) -> None:
        # Try n times to kill any remaining child processes
        for n in range(20):
            for process in self.processes:
                if process.poll() is None:
                    if n >= 5:
                        print("Still waiting for process", process.pid, process.args)
                    process.kill()
                    process.wait(1)
        # outbox: the suite turns ResourceWarning into an error: close the pipes.
        for process in self.processes:
            if process.stdout is not None:
                process.stdout.close()

    def start_worker(
        self,
        args: list[str] | None = None,
        *,
        debug: bool = False,
        worker_id: str | None = None,
    ) -> subprocess.Popen:
        if args is None:
            args = []

        if worker_id is None:
            worker_id = get_random_string(32)

        # outbox: run_outbox_worker (which starts at once: no --no-startup-delay), against
        # the suite's test database; --burst is db_worker's --batch.
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                "run_outbox_worker",
                "--verbosity",
                "3",
                "--worker-id",
                worker_id,
                *["--burst" if arg == "--batch" else arg for arg in args],
            ],
            stdout=None if debug else subprocess.PIPE,
            stderr=None if debug else subprocess.STDOUT,
            env=worker_env(),
            text=True,
        )
        self.processes.append(p)
        return p

    def test_run_subprocess(self) -> None:
        result = test_tasks.noop_task.enqueue()
        process = self.start_worker(["--batch"])
        process.wait()
        self.assertEqual(process.returncode, 0)

        self.assertEqual(result.status, TaskResultStatus.READY)

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @skipIf(sys.platform == "win32", "Terminate is always forceful on Windows")
    def test_interrupt_no_tasks(self) -> None:
        process = self.start_worker()

        self.wait_until_running(None)

        process.terminate()

        # outbox: a stopping worker also deregisters and closes its threads: 5 s, not 0.5.
        process.wait(timeout=5)
        self.assertEqual(process.returncode, 0)

    @skipIf(sys.platform == "win32", "Cannot emulate CTRL-C on Windows")
    def test_interrupt_signals(self) -> None:
        for sig in [
            signal.SIGINT,  # ctrl-c
            signal.SIGTERM,
        ]:
            with self.subTest(sig):
                # outbox: longer than its WORKER_STARTUP_TIME, as the reference's 2 s is.
                result = test_tasks.sleep_for.enqueue(self.WORKER_STARTUP_TIME + 2)
                # outbox: the result's worker_ids (the reference reads its model's column).
                self.assertEqual(default_task_backend.get_result(result.id).worker_ids, [])

                self.assertGreater(result.args[0], self.WORKER_STARTUP_TIME)

                process = self.start_worker()

                # Make sure the task is running by now
                self.wait_until_running(result)

                result.refresh()
                self.assertEqual(result.status, TaskResultStatus.RUNNING)
                self.assertNotEqual(default_task_backend.get_result(result.id).worker_ids, [])

                # outbox: RUNNING from the claim on; the worker's thread starts the task a
                # moment later, longer on a loaded machine, and a signal before that hands the
                # task back (READY) as unstarted. The task sleeps 6 s: 1 s more is room.
                time.sleep(1)
                process.send_signal(sig)

                # outbox: the task runs 2 s more; the worker then stops its threads.
                process.wait(timeout=10)

                self.assertEqual(process.returncode, 0)

                result.refresh()

                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @skipIf(sys.platform == "win32", "Windows doesn't support SIGKILL")
    def test_kill(self) -> None:
        # Required to keep mypy happy
        assert hasattr(signal, "SIGKILL")

        result = test_tasks.hang.enqueue()

        process = self.start_worker()

        # Make sure the task is running by now
        self.wait_until_running(result)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)

        process.kill()

        process.wait(timeout=2)

        self.assertEqual(process.returncode, -signal.SIGKILL)

        result.refresh()

        # outbox: running until its lease expires; then another worker takes it back.
        self.assertEqual(result.status, TaskResultStatus.RUNNING)

    def test_system_exit_task(self) -> None:
        result = test_tasks.failing_task_system_exit.enqueue()

        process = self.start_worker(["--batch"])
        # outbox: the worker process's start counts in the wait (see WORKER_STARTUP_TIME).
        process.wait(timeout=30)

        self.assertEqual(process.returncode, 0)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, SystemExit)

    def test_keyboard_interrupt_task(self) -> None:
        result = test_tasks.failing_task_keyboard_interrupt.enqueue()

        process = self.start_worker(["--batch"])
        process.wait(timeout=30)

        self.assertEqual(process.returncode, 0)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)

    def test_multiple_workers(self) -> None:
        results = [test_tasks.sleep_for.enqueue(0.1) for _ in range(10)]

        for _ in range(3):
            self.start_worker(["--batch"])

        time.sleep(self.WORKER_STARTUP_TIME)

        for process in self.processes:
            # outbox: the worker process's start counts in the wait.
            process.wait(timeout=30)
            self.assertIsNotNone(process.returncode)

        for result in results:
            result.refresh()
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        all_output = ""

        for process in self.processes:
            stdout_text = process.stdout.read()  # type:ignore[union-attr]
            all_output += stdout_text
            # outbox: its own line when it stops.
            self.assertIn("stopped:", stdout_text)

        for result in results:
            # Running and successful
            # outbox: ids are integers, so counted with what precedes them.
            self.assertEqual(all_output.count(f"Task id={result.id} "), 2)
