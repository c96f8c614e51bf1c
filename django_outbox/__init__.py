"""django-outbox: a transactional outbox and durable job queue on your Django database.

Declare tasks with ``@task``; enqueue with ``my_task.enqueue(payload)`` or
``enqueue("app.tasks.my_task", payload)`` inside the caller's transaction; run them with
``manage.py run_outbox_worker``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .claimed import ClaimedJob, current_job
from .exceptions import (
    DuplicateJob,
    EnqueueError,
    Halt,
    InvalidTaskError,
    JobNotFound,
    JobStateError,
    LeaseLostError,
    OutboxError,
    PayloadDecodeError,
    PayloadError,
    PayloadValidationError,
    PublishError,
    QueueFull,
    RateLimited,
    Snooze,
    TaskNotRegisteredError,
    TimedOut,
    UnknownTaskError,
)
from .jobs.batch import EnqueuedJobs
from .jobs.control import Cancellation, cancel, resume
from .relay.inbox import receive_once
from .relay.publishing import publish, publish_many
from .retry import GIVE_UP, RetryPolicy
from .tasks.base import Task
from .tasks.enqueue import aenqueue, aenqueue_many, enqueue, enqueue_many, retry_with_payload
from .tasks.registry import task
from .worker.health import healthy

if TYPE_CHECKING:
    from .models import Job, JobStatus, Message, MessageStatus

__all__ = [
    "GIVE_UP",
    "Cancellation",
    "ClaimedJob",
    "DuplicateJob",
    "EnqueueError",
    "EnqueuedJobs",
    "Halt",
    "InvalidTaskError",
    "Job",
    "JobNotFound",
    "JobStateError",
    "JobStatus",
    "LeaseLostError",
    "Message",
    "MessageStatus",
    "OutboxError",
    "PayloadDecodeError",
    "PayloadError",
    "PayloadValidationError",
    "PublishError",
    "QueueFull",
    "RateLimited",
    "RetryPolicy",
    "Snooze",
    "Task",
    "TaskNotRegisteredError",
    "TimedOut",
    "UnknownTaskError",
    "aenqueue",
    "aenqueue_many",
    "cancel",
    "current_job",
    "enqueue",
    "enqueue_many",
    "healthy",
    "publish",
    "publish_many",
    "receive_once",
    "resume",
    "retry_with_payload",
    "task",
]


def __getattr__(name: str) -> Any:
    """``Job``, ``JobStatus``, ``Message`` and ``MessageStatus``, imported on first use.

    The model needs Django's app registry, and Django imports this package to find the app
    before the registry is ready (and a project's models.py may import ``task`` from it).
    """
    if name in ("Job", "JobStatus", "Message", "MessageStatus"):
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
