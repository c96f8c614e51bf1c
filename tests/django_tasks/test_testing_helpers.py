"""django_outbox.testing's assertions see the jobs of Django tasks (django.tasks)."""

from typing import TYPE_CHECKING

import pytest

from django_outbox import testing
from django_outbox.apps import uses_task_backend
from tests.testapp import tasks as outbox_tasks

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
    ),
]

if TYPE_CHECKING or uses_task_backend():
    from tests.testapp import django_tasks


def test_assert_not_enqueued_of_a_django_task_fails_while_a_job_of_it_waits():
    django_tasks.note.enqueue("hello")
    # It passed, finding nothing, when the helpers knew only outbox tasks.
    with pytest.raises(AssertionError, match=r"found 1: ids \["):
        testing.assert_not_enqueued(django_tasks.note)
    with pytest.raises(AssertionError, match="found 1"):
        testing.assert_not_enqueued("tests.testapp.django_tasks.note")


def test_assert_enqueued_finds_a_django_task_s_jobs_by_task_path_and_arguments():
    django_tasks.note.enqueue("hello", suffix="!")
    django_tasks.add.enqueue(1, 2)
    (job,) = testing.assert_enqueued(django_tasks.note)
    assert testing.assert_enqueued("tests.testapp.django_tasks.note") == [job]
    assert testing.assert_enqueued(django_tasks.note, args=["hello"], kwargs={"suffix": "!"}) == [
        job
    ]
    assert testing.assert_enqueued(django_tasks.note, queue="emails", count=1) == [job]
    testing.assert_not_enqueued(django_tasks.note, args=["bye"])
    testing.assert_not_enqueued(django_tasks.note, queue="default")
    testing.assert_not_enqueued(django_tasks.noop)
    assert len(testing.enqueued_jobs(django_tasks.add, args=(1, 2))) == 1


def test_a_failure_message_names_the_django_task_and_what_waits():
    django_tasks.add.enqueue(1, 2)
    with pytest.raises(AssertionError) as raised:
        testing.assert_enqueued(django_tasks.note, args=["hello"])
    message = str(raised.value)
    assert "task 'tests.testapp.django_tasks.note', args ['hello']" in message
    assert "'tests.testapp.django_tasks.add', 'default'" in message


def test_outbox_tasks_and_django_tasks_are_told_apart():
    outbox_tasks.noop.enqueue()
    django_tasks.noop.enqueue()
    assert len(testing.enqueued_jobs()) == 2
    assert len(testing.enqueued_jobs(outbox_tasks.noop)) == 1
    assert len(testing.enqueued_jobs(outbox_tasks.noop.name)) == 1
    assert len(testing.enqueued_jobs(django_tasks.noop)) == 1
    # Arguments are a Django task's: an outbox task's job never matches them.
    assert testing.enqueued_jobs(outbox_tasks.noop, args=[]) == []


def test_a_job_run_is_no_longer_enqueued():
    django_tasks.add.enqueue(1, 2)
    testing.run_jobs()
    testing.assert_not_enqueued(django_tasks.add)


def test_something_else_than_a_task_is_a_type_error():
    with pytest.raises(TypeError, match="must be an outbox task"):
        testing.enqueued_jobs(42)  # type: ignore[arg-type]
