"""The tasks the reference suite enqueues (its ``tests/tasks.py``, which its source
distribution does not ship: written here from how the suite uses each one)."""

import time
from typing import TYPE_CHECKING, Any

import django

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import task
    from django.tasks.base import TaskContext
else:
    from django_tasks import task
    from django_tasks.base import TaskContext


@task
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task
def calculate_meaning_of_life() -> int:
    return 42


@task
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task
def complex_return_value() -> Any:
    # A return value JSON cannot hold.
    return {"set": {1, 2}}


@task
def exit_task() -> None:
    exit(1)


@task
def hang() -> None:
    while True:
        time.sleep(0.1)


@task
def sleep_for(seconds: float) -> None:
    time.sleep(seconds)


@task(takes_context=True)
def get_task_id(context: TaskContext) -> str:
    return context.task_result.id


@task(takes_context=True)
def test_context(context: TaskContext, attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
