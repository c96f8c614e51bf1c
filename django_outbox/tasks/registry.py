"""The tasks this process knows: ``@task`` declares and registers them.

Workers run only these, never a dotted path read from a row; enqueue finds them by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, overload

from ..codecs import Codec
from ..exceptions import InvalidTaskError, UnknownTaskError
from ..retry import RetryPolicy, RetryStrategy
from .base import Handler, PayloadValidator, Task

if TYPE_CHECKING:
    from typing import Unpack

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


def find_task(name: str) -> Task | None:
    """Return the task registered as ``name``, or None."""
    return _tasks.get(name)


def registered_names() -> list[str]:
    return sorted(_tasks)


def registered_tasks() -> list[Task]:
    """Return the registered tasks, by name."""
    return [_tasks[name] for name in sorted(_tasks)]


class TaskOptions(TypedDict, total=False):
    """The options of ``@task``; ``Task`` says what each does."""

    name: str | None
    queue: str | None
    max_attempts: int | None
    priority: int | None
    atomic: bool
    retry: RetryPolicy | None
    retry_strategy: RetryStrategy | None
    give_up_on: tuple[type[BaseException], ...]
    validate_payload: PayloadValidator | None
    max_execute_time: float | None
    timeout: float | None
    codec: Codec | None
    cron: str | None
    concurrency: int | None
    concurrency_per_key: int | None
    rate_limit: str | None
    rate_limit_per_key: str | None


@overload
def task(func: Handler, /) -> Task: ...
@overload
def task(**options: Unpack[TaskOptions]) -> Callable[[Handler], Task]: ...
def task(func: Handler | None = None, /, **options: Any) -> Task | Callable[[Handler], Task]:
    """Declare a task: ``@task`` or ``@task(queue="emails", max_attempts=10, ...)``.

    Options: ``name`` (default: module.function), ``queue``, ``max_attempts`` (the first run
    counts), ``priority`` (higher runs first), ``atomic`` (run in a transaction that commits with
    the job's success; default True), ``retry`` (a RetryPolicy), ``retry_strategy`` (a callable
    ``(job, exc)`` returning a delay, ``GIVE_UP`` or None), ``give_up_on`` (exception classes
    that fail the job without retrying), ``validate_payload`` (a callable that raises, or returns
    False, to refuse a payload at enqueue: ``PayloadValidationError``, nothing written),
    ``max_execute_time`` (seconds after which a running job's stack is logged at ERROR) and
    ``timeout`` (seconds after which its attempt counts as failed; see ``watchdog``), ``codec``
    (turns payloads into JSON and back; see ``django_outbox.codecs``), ``cron`` (a cron
    expression such as ``"*/5 * * * *"``: workers enqueue the task, without a payload, once per
    tick; see ``django_outbox.cron``), ``concurrency`` and ``rate_limit`` (at most that many
    jobs running at once, and starts per period such as ``"10/s"``, across every worker) and
    their ``_per_key`` twins (the same for each limit key's jobs; see ``django_outbox.limits``).
    """

    def decorate(function: Handler) -> Task:
        declared = Task(function, **options)
        register(declared)
        return declared

    if func is not None:
        return decorate(func)
    return decorate
