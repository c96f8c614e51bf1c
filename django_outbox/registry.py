"""The tasks this process knows. Workers run only these, never a dotted path read from a row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .exceptions import InvalidTaskError, UnknownTaskError

if TYPE_CHECKING:
    from .tasks import Task

_tasks: dict[str, Task] = {}


def register(task: Task) -> None:
    """Register ``task`` under its name; the same function may be registered again (reloads)."""
    existing = _tasks.get(task.name)
    if existing is not None and existing.qualified_function != task.qualified_function:
        raise InvalidTaskError(
            f"Two tasks are named {task.name!r}: {existing.qualified_function} and "
            f"{task.qualified_function}. Give one of them another name with @task(name=...)."
        )
    _tasks[task.name] = task


def unregister(name: str) -> None:
    _tasks.pop(name, None)


def get_task(name: str) -> Task:
    """Return the task registered as ``name``, or raise UnknownTaskError."""
    try:
        return _tasks[name]
    except KeyError:
        raise UnknownTaskError(
            f"No task is registered as {name!r}. Decorate the function with "
            "@django_outbox.task and make sure its module is imported: django-outbox imports "
            "the tasks.py module of every installed app. Known tasks: "
            f"{', '.join(sorted(_tasks)) or 'none'}."
        ) from None


def registered_names() -> list[str]:
    return sorted(_tasks)


def registered_tasks() -> list[Task]:
    """Return the registered tasks, by name."""
    return [_tasks[name] for name in sorted(_tasks)]
