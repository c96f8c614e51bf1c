# Adapted from django-tasks-db 0.13.0, tests/tests.py (DatabaseBackendPruneTaskResultsTestCase).
# Copyright (c) Jake Howard and individual contributors. BSD 3-clause license: see LICENSE.
# Changes for OutboxBackend are marked "outbox:". The reference runs its prune_db_task_results
# command; these run outbox_prune (peer.prune_task_results maps its options).
from contextlib import redirect_stderr
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import execute_from_command_line
from django.test import TransactionTestCase, override_settings
from django.utils import timezone

from django_outbox.apps import uses_task_backend

pytestmark = pytest.mark.skipif(
    not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
)

if uses_task_backend():
    try:
        from django.tasks import TaskResultStatus
        from django.tasks.exceptions import TaskResultDoesNotExist
    except ImportError:
        from django_tasks import TaskResultStatus  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.exceptions import (  # type: ignore[assignment,no-redef,unused-ignore]
            TaskResultDoesNotExist,
        )

    from tests.django_tasks.reference import peer
    from tests.django_tasks.reference import tasks as test_tasks
    from tests.django_tasks.reference.peer import DBTaskResult


# outbox: the queues of the reference's settings for these tests (queue-1 beside default).
@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_outbox.backends.OutboxBackend",
            "QUEUES": ["default", "queue-1"],
        },
    }
)
class DatabaseBackendPruneTaskResultsTestCase(TransactionTestCase):
    prune_task_results = staticmethod(peer.prune_task_results)

    # outbox: the reference counts 3 queries a prune; outbox_prune deletes in batches, each
    # its own short transaction, so these tests do not count them. Its output is its own
    # ("Deleted 1 job.", not "Deleted 1 task result(s)").

    def test_prunes_tasks(self) -> None:
        result = test_tasks.noop_task.enqueue()

        DBTaskResult.objects.all().update(
            status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
        )

        self.assertEqual(DBTaskResult.objects.finished().count(), 1)

        stdout = StringIO()

        self.prune_task_results(min_age_days=0, stdout=stdout, verbosity=3)

        self.assertEqual(DBTaskResult.objects.finished().count(), 0)

        with self.assertRaises(TaskResultDoesNotExist):
            result.refresh()

        self.assertEqual(stdout.getvalue().strip(), "Deleted 1 job.")

    def test_doesnt_prune_new_tasks(self) -> None:
        result = test_tasks.noop_task.enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        stdout = StringIO()
        self.prune_task_results(min_age_days=0, stdout=stdout, verbosity=3)

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        result.refresh()

        self.assertEqual(stdout.getvalue().strip(), "Deleted 0 jobs.")

    def test_doesnt_prune_running_tasks(self) -> None:
        result = test_tasks.noop_task.enqueue()

        DBTaskResult.objects.all().update(status=TaskResultStatus.RUNNING)

        self.assertEqual(DBTaskResult.objects.running().count(), 1)

        self.prune_task_results(min_age_days=0)

        self.assertEqual(DBTaskResult.objects.running().count(), 1)

        result.refresh()

    def test_only_prunes_specified_queue(self) -> None:
        result = test_tasks.noop_task.enqueue()
        queue_1_result = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        DBTaskResult.objects.all().update(
            status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
        )

        self.assertEqual(DBTaskResult.objects.successful().count(), 2)

        self.prune_task_results(queue_name="queue-1", min_age_days=0)

        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

        result.refresh()

        with self.assertRaises(TaskResultDoesNotExist):
            queue_1_result.refresh()

    def test_prune_all_queues(self) -> None:
        test_tasks.noop_task.enqueue()
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        DBTaskResult.objects.all().update(
            status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
        )

        self.assertEqual(DBTaskResult.objects.successful().count(), 2)

        self.prune_task_results(queue_name="*", min_age_days=0)

        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

    def test_min_age(self) -> None:
        one_day_result = test_tasks.noop_task.enqueue()

        DBTaskResult.objects.ready().update(
            status=TaskResultStatus.SUCCESSFUL,
            finished_at=timezone.now() - timedelta(days=1),
        )

        three_day_result = test_tasks.noop_task.enqueue()
        DBTaskResult.objects.ready().update(
            status=TaskResultStatus.SUCCESSFUL,
            finished_at=timezone.now() - timedelta(days=3),
        )

        self.assertEqual(DBTaskResult.objects.successful().count(), 2)

        self.prune_task_results()

        self.assertEqual(DBTaskResult.objects.successful().count(), 2)

        self.prune_task_results(min_age_days=3)

        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

        one_day_result.refresh()

        with self.assertRaises(TaskResultDoesNotExist):
            three_day_result.refresh()

        self.prune_task_results(min_age_days=1)

        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

    def test_failed_min_age(self) -> None:
        successful_result = test_tasks.noop_task.enqueue()

        DBTaskResult.objects.ready().update(
            status=TaskResultStatus.SUCCESSFUL,
            finished_at=timezone.now() - timedelta(days=3),
        )

        failed_result = test_tasks.noop_task.enqueue()
        DBTaskResult.objects.ready().update(
            status=TaskResultStatus.FAILED,
            finished_at=timezone.now() - timedelta(days=3),
        )

        self.assertEqual(DBTaskResult.objects.finished().count(), 2)

        self.prune_task_results()

        self.assertEqual(DBTaskResult.objects.finished().count(), 2)

        self.prune_task_results(min_age_days=3, failed_min_age_days=5)

        self.assertEqual(DBTaskResult.objects.finished().count(), 1)

        failed_result.refresh()

        with self.assertRaises(TaskResultDoesNotExist):
            successful_result.refresh()

        self.prune_task_results(min_age_days=3, failed_min_age_days=1)

        with self.assertRaises(TaskResultDoesNotExist):
            failed_result.refresh()

    def test_failed_min_age_zero(self) -> None:
        successful_result = test_tasks.noop_task.enqueue()
        DBTaskResult.objects.ready().update(
            status=TaskResultStatus.SUCCESSFUL,
            finished_at=timezone.now() - timedelta(days=1),
        )

        failed_result = test_tasks.noop_task.enqueue()
        DBTaskResult.objects.ready().update(
            status=TaskResultStatus.FAILED,
            finished_at=timezone.now() - timedelta(days=1),
        )

        self.assertEqual(DBTaskResult.objects.finished().count(), 2)

        self.prune_task_results(min_age_days=14, failed_min_age_days=0)

        self.assertEqual(DBTaskResult.objects.finished().count(), 1)

        successful_result.refresh()

        with self.assertRaises(TaskResultDoesNotExist):
            failed_result.refresh()

    def test_dry_run(self) -> None:
        test_tasks.noop_task.enqueue()

        DBTaskResult.objects.all().update(
            status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
        )

        self.assertEqual(DBTaskResult.objects.count(), 1)

        stdout = StringIO()
        self.prune_task_results(min_age_days=0, dry_run=True, stdout=stdout, verbosity=3)

        self.assertEqual(DBTaskResult.objects.count(), 1)

        # outbox: its own dry-run report: counts by status, then the total.
        self.assertIn("Would delete up to 1 job", stdout.getvalue())

    def test_negative_age(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                # outbox: --older-than (a duration) is the reference's --min-age-days.
                execute_from_command_line(["django-admin", "outbox_prune", "--older-than=-1d"])
        # outbox: its own message.
        self.assertIn("must be more than 0", output.getvalue())
