"""Django's tasks framework (django.tasks) on the outbox: django_outbox.backends."""

import asyncio
import dataclasses
import datetime
import logging
import pickle
from typing import TYPE_CHECKING

import django
import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.utils import timezone

from django_outbox.apps import uses_task_backend
from django_outbox.models import Job, JobStatus
from django_outbox.testing import run_jobs
from tests.helpers import run_worker
from tests.testapp.models import Note

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
    ),
]

if TYPE_CHECKING or uses_task_backend():
    if TYPE_CHECKING or django.VERSION >= (6, 0):
        from django.tasks import TaskResultStatus, task, task_backends
        from django.tasks.base import Task as DjangoTask
        from django.tasks.exceptions import (
            InvalidTask,
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
    else:
        from django_tasks import TaskResultStatus, task, task_backends
        from django_tasks.base import Task as DjangoTask
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
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


def test_a_task_that_raises_fails_at_once_as_with_django_s_backends():
    result = django_tasks.fails.enqueue("no luck")
    run_worker()
    fetched = task_backends["default"].get_result(result.id)
    assert Job.objects.get(pk=result.id).status == JobStatus.FAILED
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.finished_at is not None
    assert fetched.attempts == 1
    assert [error.exception_class for error in fetched.errors] == [ValueError]
    assert "ValueError: no luck" in fetched.errors[0].traceback
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


# The behaviours Django's own tests check of its backends (django/django tests/tasks:
# test_immediate_backend.py, test_dummy_backend.py, test_tasks.py), for this one.


def test_the_configured_backend_is_the_outbox_s():
    backend = task_backends["default"]
    assert isinstance(backend, OutboxBackend)
    assert (backend.alias, backend.options) == ("default", {})
    assert task_backends["non_atomic"].options == {"ATOMIC": False}
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)


def test_enqueue_returns_a_ready_result_with_the_task_and_its_arguments():
    result = django_tasks.noop.enqueue(1, two=3)
    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None, None, None)
    assert result.enqueued_at is not None
    assert result.task == django_tasks.noop
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert (result.attempts, result.worker_ids, result.errors) == (0, [], [])
    assert result.backend == "default"
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value


def test_get_result_returns_what_enqueue_returned_until_the_job_runs():
    later = timezone.now() + datetime.timedelta(hours=1)
    for declared in [django_tasks.noop, django_tasks.noop.using(priority=7, run_after=later)]:
        result = declared.enqueue("a", b=[1])
        assert django_tasks.noop.get_result(result.id) == result
        assert task_backends["default"].get_result(result.id) == result
        refreshed = dataclasses.replace(result)
        refreshed.refresh()
        assert refreshed == result


def test_a_finished_result_has_its_times_attempts_and_return_value():
    result = django_tasks.add.enqueue(40, 2)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished is True
    assert result.return_value == 42
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1
    assert len(result.worker_ids) == 1
    assert result.worker_ids[0]


def test_get_result_of_another_task_s_id_is_a_mismatch():
    result = django_tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        django_tasks.noop.get_result(result.id)


def test_arguments_json_cannot_hold_are_a_type_error_as_with_django_s_backends():
    with pytest.raises(TypeError, match="Unsupported type"):
        django_tasks.noop.enqueue(datetime.datetime.now())
    with pytest.raises(TypeError, match="Unsupported type"):
        django_tasks.noop.enqueue(when={1, 2})
    assert not Job.objects.exists()


def test_django_s_validation_of_priority_run_after_and_context_applies():
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        django_tasks.noop.using(run_after=datetime.datetime.now())
    for priority in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            django_tasks.noop.using(priority=priority)  # type: ignore[arg-type]
    for priority in (-100, 0, 100):
        assert django_tasks.noop.using(priority=priority).priority == priority
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(takes_context=True)(django_tasks.add.func)


def test_a_queue_the_backend_does_not_list_is_refused_at_enqueue(settings):
    declared = django_tasks.noop.using(queue_name="emails")
    settings.TASKS = {
        "default": {"BACKEND": "django_outbox.backends.OutboxBackend", "QUEUES": ["other"]}
    }
    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid for backend"):
        declared.enqueue()

    async def aenqueue():
        try:
            await declared.aenqueue()
        finally:
            await sync_to_async(connections.close_all)()

    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid for backend"):
        asyncio.run(aenqueue())
    assert not Job.objects.exists()


def test_a_task_that_takes_its_context_sees_its_own_result():
    result = django_tasks.own_result_id.enqueue()
    run_worker()
    assert django_tasks.own_result_id.get_result(result.id).return_value == result.id


@pytest.mark.parametrize(
    ("declared", "exception", "message"),
    [
        ("fails", ValueError, "ValueError: no luck\n"),
        ("exits", SystemExit, "SystemExit: This task exited\n"),
        ("raises_nested", ValueError, "ValueError: This task failed\n"),
        ("returns_a_set", TypeError, "Unsupported type"),
    ],
)
def test_an_exception_or_a_return_value_json_cannot_hold_fails_the_task(
    declared, exception, message
):
    args = ["no luck"] if declared == "fails" else []
    result = getattr(django_tasks, declared).enqueue(*args)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished is True
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert len(result.errors) == result.attempts == 1
    assert result.errors[0].exception_class is exception
    if message.endswith("\n"):
        assert result.errors[0].traceback.endswith(message), result.errors[0].traceback
    else:
        assert message in result.errors[0].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_aenqueue_and_aget_result():
    async def enqueue_then_read():
        result = await django_tasks.add.aenqueue(2, 3)
        assert result.status == TaskResultStatus.READY
        assert await django_tasks.add.aget_result(result.id) == result
        with pytest.raises(TaskResultDoesNotExist):
            await django_tasks.add.aget_result("123456789")
        # aenqueue ran in asgiref's thread, on a connection of its own.
        await sync_to_async(connections.close_all)()
        return result

    result = asyncio.run(enqueue_then_read())
    run_worker()

    async def arefresh():
        await result.arefresh()
        await sync_to_async(connections.close_all)()

    asyncio.run(arefresh())
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)


def test_django_s_tasks_logger_records_enqueue_start_and_finish(caplog):
    # The backport on Django 5.2 logs as "django_tasks".
    logger_name = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    caplog.set_level(logging.DEBUG, logger=logger_name)
    result = django_tasks.add.enqueue(1, 1)
    failed = django_tasks.fails.using(priority=1).enqueue("logged")
    run_worker()
    lines = [r.getMessage() for r in caplog.records if r.name == logger_name]
    assert (
        f"Task id={result.id} path=tests.testapp.django_tasks.add enqueued backend=default" in lines
    )
    for status in ("RUNNING", "SUCCESSFUL"):
        assert f"Task id={result.id} path=tests.testapp.django_tasks.add state={status}" in lines
    assert f"Task id={failed.id} path=tests.testapp.django_tasks.fails state=FAILED" in lines


@pytest.mark.skipif(
    not hasattr(DjangoTask if uses_task_backend() else object, "_reconstruct"),
    reason="this version of Django's Task does not pickle",
)
def test_a_result_pickles():
    result = django_tasks.add.enqueue(1, 2)
    assert pickle.loads(pickle.dumps(result)) == result
