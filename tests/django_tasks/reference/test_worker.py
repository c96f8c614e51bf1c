# Adapted from django-tasks-db 0.13.0, tests/tests.py (DatabaseBackendWorkerTestCase).
# Copyright (c) Jake Howard and individual contributors. BSD 3-clause license: see LICENSE.
# Changes for OutboxBackend are marked "outbox:". The reference runs its db_worker command;
# these run run_outbox_worker (peer.run_worker maps db_worker's options onto its own).
import logging
from collections import Counter
from contextlib import redirect_stderr
from datetime import timedelta
from functools import partial
from io import StringIO
from typing import cast

import pytest
from django.core.management import CommandError, execute_from_command_line
from django.db import connection, connections, transaction
from django.test import TransactionTestCase, override_settings
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_outbox.apps import uses_task_backend
from django_outbox.models import JobStatus

pytestmark = pytest.mark.skipif(
    not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
)

if uses_task_backend():
    try:
        from django.tasks import TaskResultStatus
        from django.tasks.base import Task

        LOGGER = "django.tasks"
    except ImportError:
        from django_tasks import TaskResultStatus  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.base import Task  # type: ignore[assignment,no-redef,unused-ignore]

        LOGGER = "django_tasks"

    from tests.django_tasks.reference import peer
    from tests.django_tasks.reference import tasks as test_tasks
    from tests.django_tasks.reference.peer import DBTaskResult

OUTBOX_BACKEND = "django_outbox.backends.OutboxBackend"


# outbox: no "dummy" backend beside it: the outbox worker runs every outbox backend's jobs
# (there is no --backend).
@override_settings(
    TASKS={
        "default": {
            "BACKEND": OUTBOX_BACKEND,
            "QUEUES": ["default", "queue-1"],
        },
    }
)
class DatabaseBackendWorkerTestCase(TransactionTestCase):
    worker_id = get_random_string(32)

    run_worker = staticmethod(
        partial(
            peer.run_worker,
            verbosity=0,
            batch=True,
            interval=0,
            startup_delay=False,
            worker_id=worker_id,
        )
    )

    def tearDown(self) -> None:
        logger = logging.getLogger("django_tasks_db")
        tasks_logger = logging.getLogger(LOGGER)

        # Reset the logger after every run, to ensure the correct `stdout` is used
        for handler in logger.handlers:
            logger.removeHandler(handler)

        for handler in tasks_logger.handlers:
            tasks_logger.removeHandler(handler)

    # outbox: the reference counts the worker's queries (8 for one task); the outbox worker's
    # differ (it registers itself, heartbeats and takes back expired leases from threads of
    # its own), so its tests here do not count them.

    def test_run_enqueued_task(self) -> None:
        for task in [
            test_tasks.noop_task,
            # test_tasks.noop_task_async,
        ]:
            with self.subTest(task):
                result = cast(Task, task).enqueue()
                self.assertEqual(DBTaskResult.objects.ready().count(), 1)

                self.assertEqual(result.status, TaskResultStatus.READY)

                self.run_worker()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertEqual(result.attempts, 0)
                result.refresh()
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type:ignore[arg-type,misc]
                self.assertGreaterEqual(result.finished_at, result.started_at)  # type:ignore[arg-type,misc]
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertEqual(result.attempts, 1)

                self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    def test_batch_processes_all_tasks(self) -> None:
        for _ in range(3):
            test_tasks.noop_task.enqueue()
        test_tasks.failing_task_value_error.enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 4)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 3)
        self.assertEqual(DBTaskResult.objects.failed().count(), 1)

    def test_no_tasks(self) -> None:
        self.run_worker()

    def test_doesnt_process_different_queue(self) -> None:
        result = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(queue_name=result.task.queue_name)

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    def test_process_all_queues(self) -> None:
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(queue_name="*")

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    def test_process_all_queues_excluding_one_queue(self) -> None:
        test_tasks.noop_task.enqueue()
        excluded_result = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 2)

        self.run_worker(queue_name="*", exclude_queues="queue-1")

        excluded_result.refresh()
        self.assertEqual(excluded_result.status, TaskResultStatus.READY)
        self.assertEqual(DBTaskResult.objects.ready().count(), 1)
        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

    def test_exclude_queues_requires_processing_all_queues(self) -> None:
        test_tasks.noop_task.enqueue()
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 2)

        # outbox: its own message: --queue and --exclude-queue are one or the other.
        with self.assertRaisesMessage(
            CommandError, "--exclude-queue runs every queue but those it names"
        ):
            self.run_worker(queue_name="default,queue-1", exclude_queues="queue-1")

        self.assertEqual(DBTaskResult.objects.ready().count(), 2)
        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

    def test_excluding_unknown_queue_processes_selected_queues(self) -> None:
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(queue_name="*", exclude_queues="missing")

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

    def test_failing_task(self) -> None:
        result = test_tasks.failing_task_value_error.enqueue()
        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)

        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type: ignore
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type: ignore
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018

        self.assertEqual(result.errors[0].exception_class, ValueError)
        traceback = result.errors[0].traceback
        self.assertTrue(
            traceback and traceback.endswith("ValueError: This task failed due to ValueError\n"),
            traceback,
        )

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    def test_complex_exception(self) -> None:
        result = test_tasks.complex_exception.enqueue()
        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)

        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type: ignore
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type: ignore
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018

        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn('ValueError(ValueError("This task failed"))', result.errors[0].traceback)

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    def test_complex_return_value(self) -> None:
        result = test_tasks.complex_return_value.enqueue()

        self.run_worker()

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type:ignore[arg-type,misc]
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type:ignore[arg-type,misc]

        self.assertIsNone(result._return_value)  # type: ignore[attr-defined]
        self.assertEqual(result.errors[0].exception_class, TypeError)
        # outbox: Django's normalize_json says "Unsupported type" (the reference serializes
        # with json.dumps: "is not JSON serializable").
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_negative_max_tasks(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                # outbox: --max-jobs is db_worker's --max-tasks.
                execute_from_command_line(["django-admin", "run_outbox_worker", "--max-jobs", "-1"])
        # outbox: its own message for a count out of range.
        self.assertIn("expected a number >= 1, got -1", output.getvalue())

    def test_zero_max_tasks(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(["django-admin", "run_outbox_worker", "--max-jobs", "0"])
        self.assertIn("expected a number >= 1, got 0", output.getvalue())

    def test_too_long_worker_id(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                # outbox: its worker_id column holds 255 characters (the reference's, 64).
                execute_from_command_line(
                    ["django-admin", "run_outbox_worker", "--worker-id", "A" * 256]
                )
        self.assertIn("A worker id must be at most 255 characters", output.getvalue())

    def test_empty_worker_id(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(["django-admin", "run_outbox_worker", "--worker-id", ""])
        # outbox: its own message.
        self.assertIn("A worker id must be a non-empty string", output.getvalue())

    def test_run_after(self) -> None:
        result = test_tasks.noop_task.using(
            run_after=timezone.now() + timedelta(hours=10)
        ).enqueue()

        self.assertEqual(DBTaskResult.objects.count(), 1)
        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.count(), 1)
        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

        DBTaskResult.objects.filter(id=result.id).update(run_after=timezone.now())

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

    def test_verbose_logging(self) -> None:
        result = test_tasks.noop_task.enqueue()

        # outbox: the worker logs through logging (to stderr, when the project configured
        # none) rather than to the command's stdout: Django's own lines are read from its
        # logger; the outbox's worker lines are its own ("worker started ...").
        with self.assertLogs(LOGGER, level="DEBUG") as captured:
            self.run_worker(verbosity=3)

        self.assertEqual(
            [record.getMessage() for record in captured.records],
            [
                f"Task id={result.id} path={test_tasks.__name__}.noop_task state=RUNNING",
                f"Task id={result.id} path={test_tasks.__name__}.noop_task state=SUCCESSFUL",
            ],
        )

    def test_invalid_task_path(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            args_kwargs={"args": [["exit", "1"]], "kwargs": {}},
            task_path="subprocess.check_output",
            backend_name="default",
        )

        self.run_worker()

        db_task_result.refresh_from_db()

        # outbox: the job's status (the reference's model stores Django's).
        self.assertEqual(db_task_result.status, JobStatus.FAILED)

    def test_missing_task_path(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            args_kwargs={"args": [], "kwargs": {}},
            task_path="missing.func",
            backend_name="default",
        )

        self.run_worker()

        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, JobStatus.FAILED)

    def test_worker_doesnt_exit_on_failure(self) -> None:
        result = test_tasks.exit_task.enqueue()

        self.run_worker()

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)

    def test_worker_with_locked_rows(self) -> None:
        # outbox: on SQLite the whole database is locked (the reference's skipIf).
        if connection.vendor == "sqlite":
            self.skipTest("SQLite locks the entire database")
        result_1 = test_tasks.noop_task.enqueue()
        new_connection = connections.create_connection("default")

        with transaction.atomic():
            locked_tasks_query = str(DBTaskResult.objects.select_for_update().query)

        try:
            # Start a transaction in the other connection
            with new_connection.cursor() as c:
                c.execute("BEGIN")

            # Lock the current rows in the table
            with new_connection.cursor() as c:
                c.execute(locked_tasks_query)
                results = list(c.fetchall())
            self.assertEqual(len(results), 1)

            # Add another task which isn't locked
            result_2 = test_tasks.noop_task.enqueue()

            self.run_worker()
        finally:
            new_connection.close()

        result_1.refresh()
        result_2.refresh()

        self.assertEqual(result_1.status, TaskResultStatus.READY)
        self.assertEqual(result_2.status, TaskResultStatus.SUCCESSFUL)

    def test_max_tasks(self) -> None:
        results = [test_tasks.noop_task.enqueue() for _ in range(5)]

        stdout = StringIO()
        self.run_worker(max_tasks=2, stdout=stdout, verbosity=3)

        # outbox: its own line when it stops.
        self.assertIn("stopped: 2 claimed: 2 succeeded", stdout.getvalue())

        for result in results:
            result.refresh()

        statuses = Counter(result.status for result in results)

        self.assertEqual(statuses[TaskResultStatus.SUCCESSFUL], 2)
        self.assertEqual(statuses[TaskResultStatus.READY], 3)

    def test_takes_context(self) -> None:
        result = test_tasks.get_task_id.enqueue()

        self.run_worker()

        result.refresh()

        self.assertEqual(result.return_value, result.id)

    def test_context(self) -> None:
        result = test_tasks.test_context.enqueue(1)

        self.run_worker()
        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_task_import_string(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            args_kwargs={"args": [], "kwargs": {}},
            task_path=f"{test_tasks.__name__}.some_test",
            backend_name="default",
        )
        self.run_worker()
        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, JobStatus.FAILED)
        # outbox: a path read from a row is looked up among the declared tasks, never
        # imported: the error names it as undeclared, not as an ImportError.
        self.assertIn("UnknownDjangoTask", db_task_result.last_traceback)
