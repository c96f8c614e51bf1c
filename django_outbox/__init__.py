"""django-outbox: a transactional outbox and durable job queue on your Django database.

Declare tasks with ``@task``; enqueue with ``my_task.enqueue(payload)`` or
``enqueue("app.tasks.my_task", payload)`` inside the caller's transaction; run them with
``manage.py run_outbox_worker``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .context import ClaimedJob, current_job
from .exceptions import (
    EnqueueError,
    InvalidTaskError,
    LeaseLostError,
    OutboxError,
    PayloadError,
    TaskNotRegisteredError,
    UnknownTaskError,
)
from .retry import GIVE_UP, RetryPolicy
from .tasks import Task, task

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "GIVE_UP",
    "ClaimedJob",
    "EnqueueError",
    "InvalidTaskError",
    "LeaseLostError",
    "OutboxError",
    "PayloadError",
    "RetryPolicy",
    "Task",
    "TaskNotRegisteredError",
    "UnknownTaskError",
    "current_job",
    "enqueue",
    "enqueue_many",
    "task",
]


def enqueue(
    task: str | Task,
    payload: Any = None,
    *,
    delay: datetime.timedelta | float | None = None,
    run_at: datetime.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> Job:
    """Write a job for ``task`` (a Task or its registered name) in the caller's transaction.

    See ``django_outbox.enqueuing.enqueue``.
    """
    # Imported here: the models can't be imported before Django's app registry is ready, and
    # this package is imported while INSTALLED_APPS loads.
    from .enqueuing import enqueue as enqueue_job

    return enqueue_job(task, payload, delay=delay, run_at=run_at, priority=priority, queue=queue)


def enqueue_many(
    task: str | Task,
    payloads: Iterable[Any],
    *,
    delay: datetime.timedelta | float | None = None,
    run_at: datetime.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> list[Job]:
    """Write one job per payload in the caller's transaction, in one INSERT.

    See ``django_outbox.enqueuing.enqueue_many``.
    """
    from .enqueuing import enqueue_many as enqueue_jobs

    return enqueue_jobs(task, payloads, delay=delay, run_at=run_at, priority=priority, queue=queue)
