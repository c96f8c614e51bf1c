"""Declaring tasks: names, options, validation, and the registry workers run from."""

import pytest

from django_outbox import InvalidTaskError, RetryPolicy, Task, UnknownTaskError, task
from django_outbox.tasks.registry import get_task, unregister
from tests.testapp import tasks as test_tasks


def test_the_default_name_is_module_and_function():
    assert test_tasks.noop.name == "tests.testapp.tasks.noop"
    assert get_task("tests.testapp.tasks.noop") is test_tasks.noop


def test_a_task_is_still_callable_directly():
    assert test_tasks.noop({"a": 1}) is None


def test_options_are_kept():
    assert test_tasks.write_note.queue == "emails"
    assert test_tasks.write_note.max_attempts == 10
    assert test_tasks.write_note.atomic is True
    assert test_tasks.non_atomic_note.atomic is False


def test_defaults_come_from_the_setting(settings):
    settings.OUTBOX = {**settings.OUTBOX, "DEFAULT_QUEUE": "general", "MAX_ATTEMPTS": 7}
    assert test_tasks.noop.queue == "general"
    assert test_tasks.noop.max_attempts == 7


def test_explicit_name_and_bare_decorator():
    try:

        @task(name="custom.name", queue="q1", priority=5, retry=RetryPolicy(base_delay=2))
        def handler(payload):
            return payload

        assert isinstance(handler, Task)
        assert get_task("custom.name") is handler
        assert handler.priority == 5
        assert handler.retry_policy.base_delay == 2
    finally:
        unregister("custom.name")


def test_the_same_name_for_two_functions_is_refused():
    try:

        @task(name="taken")
        def first(payload): ...

        with pytest.raises(InvalidTaskError, match="Two tasks are named 'taken'"):

            @task(name="taken")
            def second(payload): ...

    finally:
        unregister("taken")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": ""}, "non-empty string"),
        ({"queue": "x" * 101}, "longer than 100"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1"),
        ({"max_attempts": 2**31}, "max_attempts must be an integer from 1"),
        ({"max_attempts": True}, "max_attempts"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"priority": 2**40}, "priority must be between"),
        ({"retry": {"BASE_DELAY": 1}}, "RetryPolicy"),
        ({"retry_strategy": 3}, "retry_strategy must be callable"),
        ({"give_up_on": (ValueError, "KeyError")}, "give_up_on"),
        ({"name": ""}, "name must be a non-empty string"),
    ],
)
def test_invalid_options_are_refused_at_declaration(options, message):
    with pytest.raises(InvalidTaskError, match=message):

        @task(**options)
        def handler(payload): ...


def test_unknown_names_raise_with_the_known_ones():
    with pytest.raises(UnknownTaskError, match=r"No task is registered as 'nope'.*noop"):
        get_task("nope")
