"""Exceptions raised by django-outbox."""

from __future__ import annotations

import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured


class OutboxError(Exception):
    """Base class of every django-outbox error."""


class JobNotFound(OutboxError, LookupError):
    """No job has the given id (it never existed, or was pruned or deleted)."""


class JobStateError(OutboxError, ValueError):
    """The job is not in a status the operation applies to (resuming a job that isn't halted)."""


class EnqueueError(OutboxError, ValueError):
    """A job could not be enqueued because an argument is invalid; nothing was written."""


class UnknownTaskError(EnqueueError, LookupError):
    """No task is registered under the given name."""


class PayloadError(EnqueueError, TypeError):
    """A payload holds a value that cannot be stored as JSON and read back unchanged."""


class PublishError(EnqueueError):
    """A message could not be published because an argument is invalid; nothing was written."""


class DuplicateJob(EnqueueError):
    """``enqueue(unique_key=..., on_duplicate="raise")`` found a job with that key waiting.

    ``existing`` is that job. Nothing was written; the caller's transaction is usable.
    """

    def __init__(self, message: str, existing: Any) -> None:
        super().__init__(message)
        self.existing = existing


class QueueFull(EnqueueError):
    """The queue holds its ``MAX_SIZE`` of waiting jobs; nothing was written.

    ``queue``, ``size`` (jobs waiting when checked) and ``limit`` say which and how full.
    """

    def __init__(self, queue: str, size: int, limit: int, adding: int = 1) -> None:
        more = f"{adding} more jobs" if adding != 1 else "another job"
        super().__init__(
            f"Queue {queue!r} is full: {size} jobs wait and its MAX_SIZE is {limit}, so "
            f"{more} cannot be enqueued. Nothing was written."
        )
        self.queue = queue
        self.size = size
        self.limit = limit


class PayloadValidationError(EnqueueError):
    """The task's ``validate_payload`` refused the payload; nothing was written."""


class PayloadDecodeError(OutboxError):
    """A stored payload cannot be decoded back into the values it was enqueued with."""


class InvalidTaskError(OutboxError, ImproperlyConfigured):
    """A ``@task`` declaration has an invalid option."""


class LeaseLostError(OutboxError):
    """The worker no longer holds the job's lease: another worker owns the job now."""


class TaskNotRegisteredError(OutboxError):
    """A job row names a task that this worker process has not registered."""


class TimedOut(OutboxError):
    """The attempt ran longer than its task's ``timeout``: recorded as the attempt's error."""


class BrokenTransactionError(OutboxError):
    """A handler left its job's transaction unable to commit: it caught a database error."""


class JobControl(Exception):
    """Raised by a handler to end its run other than by succeeding or failing."""


class Snooze(JobControl):
    """Run this job again in ``seconds`` (or a timedelta), without using up an attempt.

    ``raise Snooze(60)``: the job goes back to ready, due in a minute. With ``atomic=True`` the
    handler's writes roll back, as with any exception.
    """

    def __init__(self, seconds: float | datetime.timedelta) -> None:
        if isinstance(seconds, datetime.timedelta):
            seconds = seconds.total_seconds()
        self.seconds = seconds
        super().__init__(seconds)


class RateLimited(JobControl):
    """The service the handler calls said "too many requests": pause the limit, retry later.

    ``raise RateLimited(retry_after=30)`` (seconds or a timedelta, e.g. an HTTP 429's
    ``Retry-After``): the job goes back to ready, due then, without using up an attempt, and
    no other job of the same limit starts before then either. ``per`` says which limit pauses:
    ``"key"`` (the task's jobs with this job's limit key), ``"task"`` or ``"queue"``; by
    default the key's, or the task's for a job without a key. Only limited jobs (a declared
    cap or rate, or a ``limit_key``) wait for a pause; see ``django_outbox.limits``.
    """

    def __init__(self, retry_after: float | datetime.timedelta, *, per: str | None = None) -> None:
        if isinstance(retry_after, datetime.timedelta):
            retry_after = retry_after.total_seconds()
        self.retry_after = retry_after
        self.per = per
        super().__init__(retry_after)


class Halt(JobControl):
    """Stop this job until ``django_outbox.resume(job_id, data)`` (a human's approval, say).

    The job is ``halted``: no worker runs it, and no attempt is used up. ``reason`` is shown in
    the admin. On its next run the handler reads the data it was resumed with from
    ``current_job().resume_data``. With ``atomic=True`` the handler's writes roll back.
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason)
