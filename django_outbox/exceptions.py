"""Exceptions raised by django-outbox."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class OutboxError(Exception):
    """Base class of every django-outbox error."""


class EnqueueError(OutboxError, ValueError):
    """A job could not be enqueued because an argument is invalid; nothing was written."""


class UnknownTaskError(EnqueueError, LookupError):
    """No task is registered under the given name."""


class PayloadError(EnqueueError, TypeError):
    """A payload holds a value that cannot be stored as JSON and read back unchanged."""


class PayloadDecodeError(OutboxError):
    """A stored payload cannot be decoded back into the values it was enqueued with."""


class InvalidTaskError(OutboxError, ImproperlyConfigured):
    """A ``@task`` declaration has an invalid option."""


class LeaseLostError(OutboxError):
    """The worker no longer holds the job's lease: another worker owns the job now."""


class TaskNotRegisteredError(OutboxError):
    """A job row names a task that this worker process has not registered."""


class BrokenTransactionError(OutboxError):
    """A handler left its job's transaction unable to commit: it caught a database error."""
