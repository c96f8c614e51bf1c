# Adapted from django-tasks-db 0.13.0, tests/tests.py (DatabaseBackendTestCase).
# Copyright (c) Jake Howard and individual contributors. BSD 3-clause license: see LICENSE.
# Changes for OutboxBackend are marked "outbox:".
import contextlib
from collections.abc import Iterator
from typing import Any, cast

import pytest
from django.db import connection, connections, transaction
from django.test import TransactionTestCase, override_settings
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_outbox.apps import uses_task_backend

pytestmark = pytest.mark.skipif(
    not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
)

if uses_task_backend():
    try:
        from django.tasks import TaskResultStatus, default_task_backend, task_backends
        from django.tasks.base import Task
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued

        LOGGER = "django.tasks"
    except ImportError:
        from django_tasks import (  # type: ignore[assignment,no-redef,unused-ignore]
            TaskResultStatus,
            default_task_backend,
            task_backends,
        )
        from django_tasks.base import Task  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.exceptions import (  # type: ignore[assignment,no-redef,unused-ignore]
            InvalidTaskError as InvalidTask,
        )
        from django_tasks.exceptions import (  # type: ignore[assignment,no-redef,unused-ignore]
            TaskResultDoesNotExist,
        )
        from django_tasks.signals import (  # type: ignore[assignment,no-redef,unused-ignore]
            task_enqueued,
        )

        LOGGER = "django_tasks"

    from tests.django_tasks.reference import tasks as test_tasks
    from tests.django_tasks.reference.peer import DatabaseBackend, DBTaskResult

# outbox: the reference backend's path in its override_settings.
OUTBOX_BACKEND = "django_outbox.backends.OutboxBackend"


class DatabaseBackendTestCase(TransactionTestCase):
    @contextlib.contextmanager
    def _capture_task_enqueued_signal(
        self,
    ) -> Iterator[list[tuple[type[Any], Any]]]:
        received: list[tuple[type[Any], Any]] = []

        def capture_signal(sender: type[Any], task_result: Any, **kwargs: Any) -> None:
            received.append((sender, task_result))

        task_enqueued.connect(capture_signal, dispatch_uid="db_enqueue_signal", weak=False)
        try:
            yield received
        finally:
            task_enqueued.disconnect(capture_signal, dispatch_uid="db_enqueue_signal")

    def get_task_count_in_new_connection(self) -> int:
        """
        See what other connections see
        """
        new_connection = connections.create_connection("default")
        try:
            with new_connection.cursor() as c:
                c.execute(str(DBTaskResult.objects.values("id").query))
                return len(c.fetchall())
        finally:
            new_connection.close()

    def test_using_correct_backend(self) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], DatabaseBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_enqueue_task(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task), self.assertNumQueries(1):
                with self._capture_task_enqueued_signal() as received:
                    result = cast(Task, task).enqueue(1, two=3)

                # outbox: a result's id is its job's id (an integer, as text), not a UUID.
                self.assertTrue(result.id.isdecimal())
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa:B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(received, [(DatabaseBackend, result)])

    async def test_enqueue_task_async(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                with self._capture_task_enqueued_signal() as received:
                    result = await cast(Task, task).aenqueue()

                # outbox: a result's id is its job's id (an integer, as text), not a UUID.
                self.assertTrue(result.id.isdecimal())
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa:B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(received, [(DatabaseBackend, result)])

    def test_get_result(self) -> None:
        with self.assertNumQueries(1):
            result = default_task_backend.enqueue(test_tasks.noop_task, [], {})

        with self.assertNumQueries(1):
            new_result = default_task_backend.get_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.noop_task, [], {})

        new_result = await default_task_backend.aget_result(result.id)

        self.assertEqual(result, new_result)

    def test_refresh_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, [], {})

        DBTaskResult.objects.all().update(
            status=TaskResultStatus.SUCCESSFUL,
            started_at=timezone.now(),
            finished_at=timezone.now(),
            return_value=42,
            worker_ids=[get_random_string(32)],
        )

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        with self.assertNumQueries(1):
            result.refresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    async def test_refresh_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, [], {})

        await DBTaskResult.objects.all().aupdate(
            status=TaskResultStatus.SUCCESSFUL,
            started_at=timezone.now(),
            finished_at=timezone.now(),
            return_value=42,
            worker_ids=[get_random_string(32)],
        )

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        await result.arefresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    def test_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            # outbox: ids are job ids; one no job has.
            default_task_backend.get_result("987654321")

    async def test_async_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            # outbox: ids are job ids; one no job has.
            await default_task_backend.aget_result("987654321")

    def test_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            # outbox: an id that is not a job's id ("123" is one).
            default_task_backend.get_result("not-an-id")

    async def test_async_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            # outbox: an id that is not a job's id ("123" is one).
            await default_task_backend.aget_result("not-an-id")

    def test_check(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 0, errors)

    @override_settings(INSTALLED_APPS=[])
    def test_database_backend_app_missing(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 1)
        # outbox: the app is django_outbox.
        self.assertIn("django_outbox", errors[0].hint)

    # outbox: test_doesnt_wait_until_transaction_commit is the reference's name; the outbox
    # enqueues in the caller's transaction, so another connection sees the job only once it
    # commits (SQLite's other connection would wait for the write lock).
    @override_settings(TASKS={"default": {"BACKEND": OUTBOX_BACKEND}})
    def test_doesnt_wait_until_transaction_commit(self) -> None:
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            self.assertEqual(DBTaskResult.objects.count(), 1)

            # SQLite locks the table during this transaction
            if connection.vendor != "sqlite":
                self.assertEqual(self.get_task_count_in_new_connection(), 0)

        if connection.vendor != "sqlite":
            self.assertEqual(self.get_task_count_in_new_connection(), 1)

    def test_enqueue_logs(self) -> None:
        with self.assertLogs(LOGGER, level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()

        self.assertEqual(len(captured_logs.output), 1)
        self.assertIn("enqueued", captured_logs.output[0])
        self.assertIn(result.id, captured_logs.output[0])

    def test_run_after_tz(self) -> None:
        for use_tz in [True, False]:
            with self.subTest(use_tz=use_tz):
                with override_settings(USE_TZ=use_tz):
                    result = test_tasks.noop_task.enqueue()
                    # outbox: the result read back, not the reference's model's property.
                    self.assertIsNone(default_task_backend.get_result(result.id).task.run_after)

    def test_validate_on_enqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": OUTBOX_BACKEND,
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with self.assertRaisesMessage(
            InvalidTask, "Queue 'unknown_queue' is not valid for backend"
        ):
            task_with_custom_queue_name.enqueue()

    async def test_validate_on_aenqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": OUTBOX_BACKEND,
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with self.assertRaisesMessage(
            InvalidTask, "Queue 'unknown_queue' is not valid for backend"
        ):
            await task_with_custom_queue_name.aenqueue()
