"""outbox_prune --queue and --task (an outbox task, or a Django task's module path), and
outbox_retry --task by a Django task's path."""

import pytest
from django.core.management import CommandError

from django_outbox.apps import uses_task_backend
from django_outbox.backends import TASK_NAME
from django_outbox.models import Job, JobStatus
from tests.management.test_housekeeping_commands import ended, run, statuses
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_prune_queue_deletes_only_the_old_jobs_of_the_queues_it_names():
    ended(tasks.noop.enqueue(queue="emails"), JobStatus.SUCCEEDED, days_ago=3)
    ended(tasks.noop.enqueue(queue="bulk"), JobStatus.FAILED, days_ago=3)
    default = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=3)
    out = run("outbox_prune", "--older-than", "1d", "--queue", "emails", "--queue", "bulk")
    assert "Deleted 2 jobs." in out
    assert set(statuses()) == {default}


def test_prune_task_deletes_only_the_old_jobs_of_that_task_and_dry_run_counts_them():
    mine = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=3)
    other = ended(tasks.noop_non_atomic.enqueue(), JobStatus.SUCCEEDED, days_ago=3)
    dry = run("outbox_prune", "--older-than", "1d", "--task", tasks.noop.name, "--dry-run")
    assert "Would delete up to 1 job" in dry
    assert run("outbox_prune", "--older-than", "1d", "--task", tasks.noop.name) == (
        "Deleted 1 job.\n"
    )
    assert set(statuses()) == {other}
    assert mine not in statuses()


@pytest.mark.skipif(not uses_task_backend(), reason="no django.tasks backend")
def test_prune_and_retry_take_a_django_task_s_module_path():
    from tests.testapp import django_tasks

    add = ended(Job.objects.get(pk=django_tasks.add.enqueue(1, 2).id), JobStatus.FAILED, days_ago=3)
    note = ended(Job.objects.get(pk=django_tasks.noop.enqueue().id), JobStatus.FAILED, days_ago=3)
    assert Job.objects.get(pk=add).task_name == TASK_NAME
    out = run("outbox_retry", "--task", "tests.testapp.django_tasks.add")
    assert statuses()[add] == JobStatus.READY
    assert statuses()[note] == JobStatus.FAILED, out
    run("outbox_prune", "--older-than", "1d", "--task", "tests.testapp.django_tasks.noop")
    assert set(statuses()) == {add}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", ""], "A queue name must be a non-empty string"),
        (["--task", ""], "A task name must not be empty"),
        (["--task", "t" * 256], "at most 255 characters"),
        (["--batch-size", "0"], "expected a number >= 1"),
    ],
)
def test_prune_refuses_a_bad_selection_at_parsing(args, message):
    job = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=3)
    with pytest.raises(CommandError, match="argument") as raised:
        run("outbox_prune", "--older-than", "1d", *args)
    assert message in str(raised.value)
    assert set(statuses()) == {job}
