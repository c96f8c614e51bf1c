"""django-outbox: a transactional outbox and durable job queue on your Django database.

Declare tasks with ``@task``; enqueue with ``my_task.enqueue(payload)`` or
``enqueue("app.tasks.my_task", payload)`` inside the caller's transaction; run them with
``manage.py run_outbox_worker``.
"""

from __future__ import annotations

from .context import ClaimedJob, current_job
from .enqueued import EnqueuedJobs
from .enqueuing import enqueue, enqueue_many
from .exceptions import (
    EnqueueError,
    InvalidTaskError,
    LeaseLostError,
    OutboxError,
    PayloadDecodeError,
    PayloadError,
    TaskNotRegisteredError,
    UnknownTaskError,
)
from .retry import GIVE_UP, RetryPolicy
from .tasks import Task, task

__all__ = [
    "GIVE_UP",
    "ClaimedJob",
    "EnqueueError",
    "EnqueuedJobs",
    "InvalidTaskError",
    "LeaseLostError",
    "OutboxError",
    "PayloadDecodeError",
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
