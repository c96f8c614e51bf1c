"""Enqueueing by task or by name: ``enqueue()``, ``enqueue_many()`` and their async twins.

Each finds the task (a ``Task``, or the name it was registered under) and hands over to its
``Task.enqueue``: one INSERT through the outbox database's connection, in the caller's
transaction. ``retry_with_payload`` gives a failed job a payload checked as these check one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ..exceptions import EnqueueError, JobNotFound, JobStateError
from ..jobs.control import job_id_of, outbox_jobs
from ..validation.text import name_error
from .base import Task
from .registry import get_task

if TYPE_CHECKING:
    from typing import Unpack

    from ..jobs.batch import EnqueuedJobs
    from ..jobs.options import EnqueueOptions
    from ..models import Job


def declared_task(task: str | Task) -> Task:
    """Return ``task``, or the task registered under the name ``task``; raise EnqueueError (or
    UnknownTaskError for a name no task has)."""
    if isinstance(task, str):
        if problem := name_error("task", task):
            raise EnqueueError(problem)
        return get_task(task)
    if not isinstance(task, Task):
        raise EnqueueError(
            f"enqueue() takes a task or a task's name, not {type(task).__name__}; "
            "decorate the function with @django_outbox.task."
        )
    return task


def enqueue(task: str | Task, payload: Any = None, **options: Unpack[EnqueueOptions]) -> Job:
    """Write a job for ``task`` (a Task or its registered name) and return it.

    The job is part of the caller's transaction on the outbox database: rolled back, it never
    existed; committed, it is durable. Raise EnqueueError (nothing written) on bad input.

    ``delay`` (a timedelta or seconds) or ``run_at`` (an aware datetime) postpone it;
    ``priority`` and ``queue`` override the task's.

    Jobs with the same ``lock`` run one at a time, in order (priority, then enqueue order),
    whatever the number of workers; a job that retries keeps its place.

    With ``depends_on`` (a job or its id, or several), the job does not start before every
    one of them has succeeded; one that fails for good keeps it waiting until it is retried
    and succeeds. An id no job has is an EnqueueError, nothing written.

    With ``unique_key``, no second job with that key is written while one waits to run
    (``unique_while="pending"``: ready, retrying or halted) or has not finished
    (``"unfinished"``: running too): the waiting job is returned instead, with
    ``is_duplicate`` true, or ``DuplicateJob`` raised (``on_duplicate="raise"``).
    Concurrent enqueuers of one key are serialized until the first one's transaction ends.

    Jobs with a ``fair_key`` are served key by key in turn within their queue: the first
    waiting job of every key, then the second, and so on, so a key with a large backlog cannot
    hold up the others. A job takes ``lock`` or ``fair_key``, and not ``depends_on`` with it.

    A task's or queue's per-key concurrency caps and rate limits count the job against its
    ``limit_key`` (default: its ``fair_key``); a job with a ``limit_key`` is also paused with
    its key when a handler raises ``RateLimited``. See ``django_outbox.limits``.

    Into a queue with a ``MAX_SIZE`` (``OUTBOX["QUEUES"]``) that many jobs already wait in,
    raise ``QueueFull``; nothing is written and the caller's transaction stays usable.
    """
    return declared_task(task).enqueue(payload, **options)


def enqueue_many(
    task: str | Task, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
) -> EnqueuedJobs:
    """Write one job per payload, in one INSERT where the database allows, and return them.

    Like ``enqueue``, inside the caller's transaction, with the options of one job
    (``depends_on`` and the unique options apart). Every payload is checked before anything is
    written: one bad payload raises (naming its index) and no job of the batch exists. The
    result is a sequence of the saved jobs; its ``ids`` come without building them.
    """
    return declared_task(task).enqueue_many(payloads, **options)


async def aenqueue(task: str | Task, payload: Any = None, **options: Unpack[EnqueueOptions]) -> Job:
    """``enqueue`` from async code: the same arguments, run in the thread Django's sync code
    of this request uses (``sync_to_async``, thread-sensitive). In an async view the job is
    written in its own transaction (autocommit), as an ORM write from async code is; to enqueue
    with other writes atomically, do both in one sync function under ``sync_to_async``."""
    return await declared_task(task).aenqueue(payload, **options)


async def aenqueue_many(
    task: str | Task, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
) -> EnqueuedJobs:
    """``enqueue_many`` from async code (see ``aenqueue``)."""
    return await declared_task(task).aenqueue_many(payloads, **options)


def build_job(task: str | Task, payload: Any = None, **options: Unpack[EnqueueOptions]) -> Job:
    """Return an unsaved Job of ``task`` for ``payload``, as ``enqueue`` would write it (for
    ``bulk_create`` in data migrations and tests); every argument checked."""
    return declared_task(task).build_job(payload, **options)


def retry_with_payload(job: Job | int, payload: Any) -> Any:
    """Give the failed or cancelled ``job`` (a Job or its id) a new payload and make it ready
    to run now, with one more attempt; return the payload it had, as stored.

    For a job that failed on its data (a poison message): the payload is checked as
    ``enqueue`` checks it (the task's ``validate_payload``, its codec, the JSON rules), so the
    task must be registered in this process. Raise UnknownTaskError, PayloadError or
    PayloadValidationError for a payload that would not be enqueued, JobNotFound for an unknown
    id, JobStateError for a job that is not failed or cancelled: in each case nothing changes.
    """
    # The model: this module is imported before the app registry is ready.
    from ..jobs.transitions import RETRYABLE, retry_failed

    job_id = job_id_of(job)
    rows = outbox_jobs().filter(pk=job_id)
    task_name = rows.values_list("task_name", flat=True).first()
    if task_name is None:
        raise JobNotFound(f"No job has id {job_id}.")
    task = get_task(task_name)
    task.check_payload(payload)
    stored = task.encode_payload(payload)
    with transaction.atomic(using=rows.db):
        # Locked: a retry or a delete at the same time waits, and the status read stays true.
        row = rows.select_for_update().values_list("status", "payload").first()
        if row is None:
            raise JobNotFound(f"No job has id {job_id}.")
        status, old_payload = row
        if status not in RETRYABLE:
            raise JobStateError(
                f"Job {job_id} is {status}: only a failed or cancelled job can be retried with "
                "a new payload."
            )
        rows.update(payload=stored)
        retry_failed(rows)
    return old_payload
