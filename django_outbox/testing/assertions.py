"""Asserting what a test enqueued: jobs of outbox tasks, and of Django tasks (``django.tasks``)
enqueued through ``django_outbox.backends.OutboxBackend``."""

from __future__ import annotations

from typing import Any, Protocol

from django.db.models import Q, QuerySet

from ..conf import get_settings
from ..django_task_jobs import TASK_NAMES, path_expression, path_of
from ..models import CLAIMABLE, Job
from ..tasks.base import Task

#: Leave out to match any payload (or any arguments of a Django task).
ANY = object()


class DjangoTask(Protocol):
    """A Django task (django.tasks' Task, or its backport's), as these helpers use it."""

    @property
    def module_path(self) -> str: ...


#: What the helpers take as a task: an outbox task, a Django task, or the name (module path)
#: of either.
TaskLike = Task | DjangoTask | str


def _django_task_path(task: Any) -> str | None:
    """The module path of ``task`` if it is a Django task (django.tasks, or its backport):
    this module must not need either installed, so the Task is known by its attributes."""
    path = getattr(task, "module_path", None)
    return path if isinstance(path, str) and callable(getattr(task, "enqueue", None)) else None


def _name(task: TaskLike) -> str:
    """How ``task`` is named in messages and in the jobs table (an outbox task's name, a Django
    task's module path, or the string given)."""
    if isinstance(task, Task):
        return task.name
    return _django_task_path(task) or str(task)


def _of_task(jobs: QuerySet[Job], task: TaskLike) -> QuerySet[Job]:
    if isinstance(task, Task):
        return jobs.filter(task_name=task.name)
    if (path := _django_task_path(task)) is not None:
        return jobs.alias(django_task_path=path_expression()).filter(
            task_name__in=TASK_NAMES, django_task_path=path
        )
    if isinstance(task, str):
        # An outbox task's name or a Django task's module path: they cannot be confused (a
        # Django task's jobs are all of the outbox tasks TASK_NAMES).
        return jobs.alias(django_task_path=path_expression()).filter(
            Q(task_name=task) | Q(task_name__in=TASK_NAMES, django_task_path=task)
        )
    raise TypeError(
        "task must be an outbox task (@django_outbox.task), a Django task (@django.tasks.task), "
        f"or the name or module path of one, not {type(task).__name__}."
    )


def enqueued_jobs(
    task: TaskLike | None = None,
    *,
    payload: Any = ANY,
    queue: str | None = None,
    args: Any = ANY,
    kwargs: Any = ANY,
) -> list[Job]:
    """Return the jobs waiting to run (ready or retrying), oldest first, that match: of
    ``task`` (an outbox task or a Django task, or its name or module path), with ``payload``
    (compared with the decoded payload), in ``queue``; a Django task's jobs also by their
    ``args`` (a list) and ``kwargs`` (a dict), as the task was enqueued with."""
    jobs: QuerySet[Job] = Job.objects.using(get_settings().database).filter(status__in=CLAIMABLE)
    if task is not None:
        jobs = _of_task(jobs, task)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    found = list(jobs.order_by("id"))
    if payload is not ANY:
        found = [job for job in found if job.decoded_payload() == payload]
    if args is not ANY or kwargs is not ANY:
        found = [job for job in found if _arguments_match(job, args, kwargs)]
    return found


def _arguments_match(job: Job, args: Any, kwargs: Any) -> bool:
    if path_of(job.task_name, job.payload) is None:
        return False  # Not a Django task's job: it has no arguments to match.
    return (args is ANY or job.payload.get("args") == list(args)) and (
        kwargs is ANY or job.payload.get("kwargs") == kwargs
    )


def _describe(
    task: TaskLike | None, payload: Any, queue: str | None, args: Any, kwargs: Any
) -> str:
    parts = [f"task {_name(task)!r}" if task is not None else "any task"]
    for name, value in (("payload", payload), ("args", args), ("kwargs", kwargs)):
        if value is not ANY:
            parts.append(f"{name} {value!r}")
    if queue is not None:
        parts.append(f"queue {queue!r}")
    return ", ".join(parts)


def assert_enqueued(
    task: TaskLike | None = None,
    *,
    payload: Any = ANY,
    queue: str | None = None,
    count: int | None = None,
    args: Any = ANY,
    kwargs: Any = ANY,
) -> list[Job]:
    """Assert that jobs matching the arguments (see ``enqueued_jobs``) wait to run: ``count``
    of them, or at least one. Return them."""
    found = enqueued_jobs(task, payload=payload, queue=queue, args=args, kwargs=kwargs)
    wanted = f"{count}" if count is not None else "at least 1"
    if (count is None and not found) or (count is not None and len(found) != count):
        waiting = [
            (
                job.pk,
                path_of(job.task_name, job.payload) or job.task_name,
                job.queue,
                job.decoded_payload(),
            )
            for job in enqueued_jobs(queue=queue)[:20]
        ]
        raise AssertionError(
            f"Expected {wanted} enqueued job(s) of "
            f"{_describe(task, payload, queue, args, kwargs)}, found {len(found)}. Waiting jobs "
            f"(id, task, queue, payload), up to 20: {waiting}"
        )
    return found


def assert_not_enqueued(
    task: TaskLike | None = None,
    *,
    payload: Any = ANY,
    queue: str | None = None,
    args: Any = ANY,
    kwargs: Any = ANY,
) -> None:
    """Assert that no job matching the arguments (see ``enqueued_jobs``) waits to run."""
    found = enqueued_jobs(task, payload=payload, queue=queue, args=args, kwargs=kwargs)
    if found:
        raise AssertionError(
            f"Expected no enqueued job of {_describe(task, payload, queue, args, kwargs)}, "
            f"found {len(found)}: ids {[job.pk for job in found]}"
        )
