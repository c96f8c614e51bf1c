"""Django's tasks framework (django.tasks) on the outbox: django_outbox.backends."""

import datetime
from typing import TYPE_CHECKING

import django
import pytest
from django.db import transaction
from django.utils import timezone

from django_outbox import EnqueueError
from django_outbox.apps import uses_task_backend
from django_outbox.models import Job, JobStatus
from django_outbox.testing import run_jobs
from tests.conftest import run_worker
from tests.testapp.models import Note

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
    ),
]

if TYPE_CHECKING or uses_task_backend():
    if TYPE_CHECKING or django.VERSION >= (6, 0):
        from django.tasks import TaskResultStatus, task_backends
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    else:
        from django_tasks import TaskResultStatus, task_backends
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

    from django_outbox.backends import TASK_NAME, OutboxBackend
    from tests.testapp import django_tasks


def test_an_enqueue_is_a_job_in_the_callers_transaction():
    with transaction.atomic():
        django_tasks.add.enqueue(1, 2)
        transaction.set_rollback(True)
    assert not Job.objects.exists()
    with transaction.atomic():
        result = django_tasks.add.enqueue(1, 2)
    job = Job.objects.get()
    assert result.id == str(job.pk)
    assert result.status == TaskResultStatus.READY
    assert (job.task_name, job.queue, job.status) == (TASK_NAME, "default", JobStatus.READY)
    assert job.payload == {"task": "tests.testapp.django_tasks.add", "args": [1, 2], "kwargs": {}}
    assert result.enqueued_at == job.enqueued_at


def test_a_worker_runs_it_and_get_result_returns_what_it_returned():
    result = django_tasks.note.enqueue("hello", suffix="!")
    job = Job.objects.get(pk=result.id)
    assert (job.queue, job.priority) == ("emails", 10)
    run_worker()
    fetched = django_tasks.note.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {"written": "hello!"}
    assert (fetched.args, fetched.kwargs) == (["hello"], {"suffix": "!"})
    assert fetched.started_at is not None
    assert fetched.finished_at is not None
    assert len(fetched.worker_ids) == 1
    assert Note.objects.get().text == "hello!"
    # refresh() reads the same.
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"written": "hello!"}


def test_a_task_that_fails_is_retried_then_failed_with_each_error():
    result = django_tasks.fails.enqueue("no luck")
    run_worker()
    fetched = task_backends["default"].get_result(result.id)
    job = Job.objects.get(pk=result.id)
    assert job.status == JobStatus.FAILED
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.attempts == job.max_attempts
    # The newest errors, as many as OUTBOX["ERROR_HISTORY"] keeps.
    assert len(fetched.errors) == min(job.max_attempts, 10)
    assert fetched.errors[-1].exception_class is ValueError
    assert "ValueError: no luck" in fetched.errors[-1].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = fetched.return_value


def test_an_atomic_task_s_writes_roll_back_with_its_failure_and_a_non_atomic_one_s_stay():
    django_tasks.writes_then_fails.enqueue("rolled back")
    django_tasks.note_then_fail.enqueue("kept")
    run_worker()
    assert list(Note.objects.values_list("text", flat=True).distinct()) == ["kept"]


def test_run_after_defers_the_job():
    later = timezone.now() + datetime.timedelta(hours=1)
    result = django_tasks.add.using(run_after=later).enqueue(1, 1)
    job = Job.objects.get(pk=result.id)
    assert job.run_at == later
    run_worker()
    assert Job.objects.get(pk=result.id).status == JobStatus.READY
    assert django_tasks.add.get_result(result.id).task.run_after == later


def test_run_after_may_be_a_delay():
    # A timedelta, which the outbox's backend takes (Django's types say a datetime).
    delayed = django_tasks.add.using(run_after=datetime.timedelta(minutes=5))  # type: ignore[arg-type]
    result = delayed.enqueue(1, 1)
    job = Job.objects.get(pk=result.id)
    delay = (job.run_at - job.enqueued_at).total_seconds()
    assert 299 < delay < 301
    with pytest.raises(InvalidTask, match="negative"):
        django_tasks.add.using(run_after=datetime.timedelta(seconds=-1))  # type: ignore[arg-type]


def test_task_enqueued_is_sent_at_enqueue_before_the_caller_commits():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(Job.objects.filter(pk=task_result.id).exists())

    task_enqueued.connect(receiver)
    try:
        with transaction.atomic():
            django_tasks.add.enqueue(1, 2)
            assert seen == [True]  # Sent inside the transaction (which sees its own row)...
            transaction.set_rollback(True)
    finally:
        task_enqueued.disconnect(receiver)
    # ... whose rollback then undid the job the signal announced.
    assert not Job.objects.exists()


def test_a_task_that_takes_its_context_sees_its_attempt():
    result = django_tasks.attempt_number.enqueue()
    run_jobs()
    assert django_tasks.attempt_number.get_result(result.id).return_value == 1


def test_an_async_task_runs():
    result = django_tasks.add_async.enqueue(2, 3)
    run_worker()
    returned: object = django_tasks.add_async.get_result(result.id).return_value
    assert returned == 5


def test_arguments_that_are_not_json_are_refused_at_enqueue():
    with pytest.raises((EnqueueError, TypeError)):
        django_tasks.add.enqueue(object(), 1)
    assert not Job.objects.exists()


def test_an_unknown_id_or_another_job_is_no_result():
    other = Job.objects.create(
        task_name="tests.testapp.tasks.noop", queue="default", max_attempts=1
    )
    for result_id in ["999999", str(other.pk), "not-an-id", ""]:
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(result_id)


def test_a_row_naming_a_function_never_declared_as_a_task_is_not_run():
    job = Job.objects.create(
        task_name=TASK_NAME,
        queue="default",
        max_attempts=1,
        payload={"task": "os.remove", "args": ["/tmp/outbox-must-not-exist"], "kwargs": {}},
    )
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "No Django task 'os.remove' is declared for the outbox backend" in job.last_error


def test_django_s_task_signals_are_sent():
    seen = []

    def receiver(signal):
        def receive(sender, task_result, **kwargs):
            seen.append((signal, sender, task_result.status))

        return receive

    receivers = {name: receiver(name) for name in ("enqueued", "started", "finished")}
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])
    try:
        django_tasks.add.enqueue(1, 2)
        run_worker()
    finally:
        task_enqueued.disconnect(receivers["enqueued"])
        task_started.disconnect(receivers["started"])
        task_finished.disconnect(receivers["finished"])
    assert seen == [
        ("enqueued", OutboxBackend, TaskResultStatus.READY),
        ("started", OutboxBackend, TaskResultStatus.RUNNING),
        ("finished", OutboxBackend, TaskResultStatus.SUCCESSFUL),
    ]


def test_a_queue_the_backend_does_not_list_is_refused_at_declaration():
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid"):
        django_tasks.add.using(queue_name="reports")
