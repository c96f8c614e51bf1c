"""Enqueue: one INSERT through the outbox database's connection, in the caller's transaction.

No ``on_commit`` and no second connection: inside ``atomic()`` the job commits or rolls back
with the caller's other writes; outside, it autocommits like any ORM write. Every argument is
checked before the INSERT, so bad input raises without touching the caller's transaction.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from . import signals
from .captured import capture
from .checks import priority_error, queue_name_error
from .conf import get_settings
from .enqueued import EnqueuedJobs
from .exceptions import DuplicateJob, EnqueueError, QueueFull
from .registry import get_task
from .serialization import brief, text_error
from .tasks import Task
from .wakeups import jobs_enqueued

if TYPE_CHECKING:
    from .models import Job

#: The furthest ahead a job may be scheduled, by ``delay`` or ``run_at``: ten years of 365 days.
#: Further is almost always a unit mistake (milliseconds for seconds); and past year 9999 no
#: datetime exists.
MAX_DELAY = datetime.timedelta(days=3650)


def _run_at(
    delay: datetime.timedelta | float | None, run_at: datetime.datetime | None
) -> datetime.datetime | None:
    """Return when the job may run; None means now, by the database's clock."""
    if delay is not None and run_at is not None:
        raise EnqueueError("Pass delay or run_at, not both.")
    if run_at is not None:
        if not isinstance(run_at, datetime.datetime):
            raise EnqueueError(f"run_at must be a datetime, not {type(run_at).__name__}.")
        if settings.USE_TZ and timezone.is_naive(run_at):
            raise EnqueueError(
                f"run_at {run_at} has no time zone. Pass an aware datetime, e.g. "
                "timezone.now() + timedelta(...) or datetime(..., tzinfo=UTC)."
            )
        try:
            # Stored in UTC (or as naive local time without USE_TZ): PostgreSQL refuses some
            # offsets Python allows (16 hours and more, fractions of a second).
            if settings.USE_TZ:
                run_at = run_at.astimezone(datetime.timezone.utc)
            elif timezone.is_aware(run_at):
                run_at = timezone.make_naive(run_at)
        except OverflowError as error:
            raise EnqueueError(
                f"run_at {run_at} cannot be represented in UTC (it falls outside years 1 to "
                "9999 there)."
            ) from error
        if run_at - timezone.now() > MAX_DELAY:
            raise EnqueueError(
                f"run_at must be at most {MAX_DELAY.days} days from now "
                f"(django_outbox.enqueuing.MAX_DELAY), not {run_at}."
            )
        return run_at
    if delay is None:
        return None
    seconds: float
    if isinstance(delay, datetime.timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = delay
    else:
        raise EnqueueError(
            f"delay must be a timedelta or a number of seconds, not {type(delay).__name__}."
        )
    # An int may be too large for a float: compare it as it is.
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise EnqueueError(f"delay must be a finite number of seconds, not {seconds}.")
    if seconds < 0:
        raise EnqueueError(f"delay must not be negative ({brief(seconds)} s); use 0 to run now.")
    if seconds > MAX_DELAY.total_seconds():
        shown = f"{float(seconds):.6g} s" if seconds < 1e300 else "more than 1e300 s"
        raise EnqueueError(
            f"delay must be at most {MAX_DELAY.days} days (django_outbox.enqueuing.MAX_DELAY), "
            f"not {shown}."
        )
    if seconds == 0:
        return None
    # This host's clock plus the delay: a skew of milliseconds against the database's clock
    # matters little against a delay, and the value is known without reading the row back.
    return timezone.now() + datetime.timedelta(seconds=seconds)


def _name_error(kind: str, name: str) -> str | None:
    """Return why a task or queue name cannot be stored, or None if it can."""
    problem = text_error(name)
    return f"The {kind} name {brief(name)} {problem}." if problem else None


def build_job(
    task: str | Task,
    payload: Any = None,
    *,
    delay: datetime.timedelta | float | None = None,
    run_at: datetime.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    with_payload: bool = True,
    lock: str | None = None,
    fair_key: str | None = None,
) -> Job:
    """Return an unsaved Job for the arguments of ``enqueue``, checking every one of them.

    Without ``with_payload``, a template for ``enqueue_many``: the payload is left unset (each
    payload is checked and encoded on its own).
    """
    if isinstance(task, str):
        if problem := _name_error("task", task):
            raise EnqueueError(problem)
        task = get_task(task)
    elif not isinstance(task, Task):
        raise EnqueueError(
            f"enqueue() takes a task or a task's name, not {type(task).__name__}; "
            "decorate the function with @django_outbox.task."
        )
    # A Task's own name, and below its queue: @task() does not look for NUL characters.
    elif problem := _name_error("task", task.name):
        raise EnqueueError(problem)
    if queue is not None and (problem := queue_name_error(queue)):
        raise EnqueueError(problem)
    if priority is not None and (problem := priority_error(priority)):
        raise EnqueueError(problem)
    if problem := _key_error("lock", lock) or _key_error("fair_key", fair_key):
        raise EnqueueError(problem)
    if fair_key is not None and lock is not None:
        raise EnqueueError(
            "A job takes lock or fair_key, not both: a key's jobs run either one at a time in "
            "order (lock) or in turn with other keys' (fair_key)."
        )
    # Imported here so that this module, re-exported by the package, imports before the app
    # registry is ready (a project's models.py may import enqueue).
    from .models import Job

    queue = queue or task.queue
    if problem := _name_error("queue", queue):
        raise EnqueueError(problem)
    if with_payload:
        task.check_payload(payload)
    job = Job(
        task_name=task.name,
        queue=queue,
        payload=task.encode_payload(payload) if with_payload else None,
        priority=task.priority_for(queue) if priority is None else priority,
        max_attempts=task.max_attempts_for(queue),
        context=capture(),
        lock_key=lock,
        fair_key=fair_key,
    )
    when = _run_at(delay, run_at)
    if when is not None:
        job.run_at = _on_the_database_clock(when)
    return job


def _on_the_database_clock(when: datetime.datetime) -> datetime.datetime:
    """Return ``when`` as the outbox database's clock reads it.

    Without ``USE_TZ``, ``when`` is naive local time (``TIME_ZONE``). PostgreSQL reads it so (its
    session time zone is ``TIME_ZONE``), but SQLite's clock, against which workers compare
    ``run_at``, is UTC whatever ``TIME_ZONE`` says: stored as local time, a delay would end
    hours early or late by the zone's offset.
    """
    if settings.USE_TZ or connections[get_settings().database].vendor != "sqlite":
        return when
    local = timezone.make_aware(when, timezone.get_default_timezone())
    return timezone.make_naive(local, datetime.timezone.utc)


#: ``unique_while``: which jobs with the key make an enqueue a duplicate.
UNIQUE_SCOPES = ("pending", "unfinished")
#: ``on_duplicate``: what enqueue does with a duplicate.
ON_DUPLICATE = ("return", "raise")
#: The longest unique_key, lock or fair_key (the columns' length).
KEY_MAX_LENGTH = 255


def _key_error(name: str, key: Any) -> str | None:
    """Return why ``key`` cannot be a job's ``name`` (unique_key, lock, fair_key), or None."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        return f"{name} must be a non-empty string, not {brief(key)}."
    if len(key) > KEY_MAX_LENGTH:
        return f"{name} must be at most {KEY_MAX_LENGTH} characters, not {len(key)}."
    if problem := text_error(key):
        return f"{name} {brief(key)} {problem}."
    return None


def _unique_options_error(unique_key: Any, unique_while: Any, on_duplicate: Any) -> str | None:
    if problem := _key_error("unique_key", unique_key):
        return problem
    if unique_while not in UNIQUE_SCOPES:
        return f"unique_while must be one of {UNIQUE_SCOPES}, not {brief(unique_while)}."
    if on_duplicate not in ON_DUPLICATE:
        return f"on_duplicate must be one of {ON_DUPLICATE}, not {brief(on_duplicate)}."
    return None


def enqueue(
    task: str | Task,
    payload: Any = None,
    *,
    delay: datetime.timedelta | float | None = None,
    run_at: datetime.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    lock: str | None = None,
    depends_on: Job | int | Iterable[Job | int] | None = None,
    unique_key: str | None = None,
    unique_while: str = "pending",
    on_duplicate: str = "return",
    fair_key: str | None = None,
) -> Job:
    """Write a job for ``task`` (a Task or its registered name) and return it.

    The job is part of the caller's transaction on the outbox database: rolled back, it never
    existed; committed, it is durable. Raise EnqueueError (nothing written) on bad input.

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

    Into a queue with a ``MAX_SIZE`` (``OUTBOX["QUEUES"]``) that many jobs already wait in,
    raise ``QueueFull``; nothing is written and the caller's transaction stays usable.
    """
    if problem := _unique_options_error(unique_key, unique_while, on_duplicate):
        raise EnqueueError(problem)
    parents = _dependency_ids(depends_on)
    if parents and fair_key is not None:
        raise EnqueueError(
            "A job takes depends_on or fair_key, not both: fair jobs are claimed by round, "
            "without waiting for other jobs."
        )
    job = build_job(
        task,
        payload,
        delay=delay,
        run_at=run_at,
        priority=priority,
        queue=queue,
        lock=lock,
        fair_key=fair_key,
    )
    from .db import queries_for  # Imports the model: see build_job.

    using = get_settings().database
    connection = connections[using]
    max_size = get_settings().queue_options(job.queue).max_size
    if unique_key is None and max_size is None and not parents:
        if fair_key is None:
            queries_for(connection).insert_job(connection, job)
        else:
            # No savepoint: nothing here is an error the caller could go on after.
            with transaction.atomic(using=using, savepoint=False):
                _serialize_key_enqueuers(job, using)
                queries_for(connection).insert_job(connection, job)
    else:
        job.unique_key = unique_key
        existing = _insert_checked(job, unique_while, max_size, parents, using)
        if existing is not None:
            if on_duplicate == "raise":
                raise DuplicateJob(
                    f"Job {existing.pk} with unique_key {brief(unique_key)} is {existing.status}: "
                    "nothing was enqueued.",
                    existing,
                )
            return existing
    jobs_enqueued(using, [job.queue])
    if signals.job_enqueued.has_listeners():
        declared = task if isinstance(task, Task) else get_task(task)
        signals.send(signals.job_enqueued, declared, job=job)
    return job


#: The most jobs one job may depend on.
DEPENDENCIES_MAX = 1_000


def _dependency_ids(depends_on: Any) -> list[int]:
    """Return the distinct ids ``depends_on`` names (a Job, an id, or an iterable of them)."""
    from .models import Job

    if depends_on is None:
        return []
    items = [depends_on] if isinstance(depends_on, Job | int | str) else depends_on
    try:
        items = list(items)
    except TypeError:
        raise EnqueueError(
            "depends_on must be a job, a job's id, or a list of them, not "
            f"{type(depends_on).__name__}."
        ) from None
    ids: list[int] = []
    for item in items:
        if isinstance(item, Job):
            if item.pk is None:
                raise EnqueueError("depends_on names a job that was never saved (it has no id).")
            ids.append(int(item.pk))
        elif isinstance(item, int) and not isinstance(item, bool):
            ids.append(item)
        else:
            raise EnqueueError(
                f"depends_on must name jobs by Job or id (int), not {type(item).__name__}."
            )
    if len(set(ids)) > DEPENDENCIES_MAX:
        raise EnqueueError(
            f"depends_on names {len(set(ids))} jobs; a job may depend on at most "
            f"{DEPENDENCIES_MAX} (django_outbox.enqueuing.DEPENDENCIES_MAX)."
        )
    return sorted(set(ids))


def _insert_checked(
    job: Job, unique_while: str, max_size: int | None, parents: list[int], using: str
) -> Job | None:
    """Insert ``job`` if its unique key is free and its queue has room; return the job that
    holds the key instead (nothing inserted), or raise QueueFull.

    Enqueuers that check wait for each other (``serialize_enqueuers``) until the first one's
    transaction ends, so no two of them both find the key free or the last place empty.
    """
    from .db import queries_for
    from .models import PENDING, Job, JobDependency, JobStatus

    queries = queries_for(connections[using])
    connection = connections[using]
    # A transaction of its own when the caller has none: the wait, the check and the insert
    # go together; a savepoint otherwise, so that QueueFull leaves the caller's usable.
    with transaction.atomic(using=using):
        if job.unique_key is not None:
            queries.serialize_enqueuers(connection, f"unique:{job.unique_key}")
            statuses = [*PENDING, JobStatus.RUNNING] if unique_while == "unfinished" else PENDING
            existing = (
                Job.objects.using(using)
                .filter(unique_key=job.unique_key, status__in=statuses)
                .order_by("pk")
                .first()
            )
            if existing is not None:
                existing.is_duplicate = True
                return existing
        if parents:
            found = set(
                Job.objects.using(using).filter(pk__in=parents).values_list("pk", flat=True)
            )
            if missing := [parent for parent in parents if parent not in found]:
                raise EnqueueError(
                    f"depends_on: no job has id {', '.join(map(str, missing[:10]))}"
                    f"{' ...' if len(missing) > 10 else ''} (never enqueued, or pruned since "
                    "it finished). Nothing was enqueued."
                )
            job.has_dependencies = True
        if max_size is not None:
            _reserve_room(job.queue, max_size, 1, using)
        if job.fair_key is not None:
            _serialize_key_enqueuers(job, using)
        queries.insert_job(connection, job)
        if parents:
            JobDependency.objects.using(using).bulk_create(
                [JobDependency(job_id=job.pk, depends_on_id=parent) for parent in parents]
            )
            Job.objects.using(using).filter(pk__in=parents, has_dependents=False).update(
                has_dependents=True
            )
    return None


def _reserve_room(queue: str, max_size: int, adding: int, using: str) -> None:
    """Raise QueueFull unless ``adding`` more jobs fit in ``queue``; others wait meanwhile."""
    from .db import queries_for
    from .models import Job

    connection = connections[using]
    queries_for(connection).serialize_enqueuers(connection, f"queue:{queue}")
    # Along the claim indexes (fair jobs have their own), and no further than the limit: a
    # full queue costs max_size rows.
    claimable = Job.objects.using(using).claimable().filter(queue=queue)
    waiting = claimable.filter(fair_key__isnull=True)[:max_size].count()
    waiting += claimable.filter(fair_key__isnull=False)[:max_size].count()
    if waiting + adding > max_size:
        raise QueueFull(queue, waiting, max_size, adding)


def _serialize_key_enqueuers(template: Job, using: str) -> None:
    """Make the other enqueuers of ``template``'s fair key wait until this transaction ends, so
    that no two of them take the same round."""
    from .db import queries_for

    connection = connections[using]
    queries_for(connection).serialize_enqueuers(
        connection, f"fair:{template.queue}:{template.fair_key}"
    )


def _assign_rounds(template: Job, using: str) -> None:
    """Give ``template`` (the first job of a fair batch) its round; the batch takes the next."""
    from .fairness import first_round

    _serialize_key_enqueuers(template, using)
    template.fair_round = first_round(template.queue, str(template.fair_key), using)


def enqueue_many(
    task: str | Task,
    payloads: Iterable[Any],
    *,
    delay: datetime.timedelta | float | None = None,
    run_at: datetime.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    lock: str | None = None,
    fair_key: str | None = None,
) -> EnqueuedJobs:
    """Write one job per payload, in one INSERT where the database allows, and return them.

    Like ``enqueue``, inside the caller's transaction. Every payload is checked before anything
    is written: one bad payload raises (naming its index) and no job of the batch exists.
    The result is a sequence of the saved jobs; its ``ids`` come without building them.
    """
    if isinstance(payloads, str | bytes | bytearray | Mapping):
        unit = {str: "character", bytes: "byte", bytearray: "byte"}.get(type(payloads), "key")
        raise EnqueueError(
            "payloads must be an iterable of payloads (e.g. a list of dicts), not a "
            f"{type(payloads).__name__}: it would enqueue one job per {unit}. For one job, "
            "call enqueue()."
        )
    try:
        payloads = iter(payloads)
    except TypeError:
        raise EnqueueError(
            "payloads must be an iterable of payloads (e.g. a list of dicts), not "
            f"{type(payloads).__name__}."
        ) from None
    # The options are the same for every job: check them once.
    template = build_job(
        task,
        None,
        delay=delay,
        run_at=run_at,
        priority=priority,
        queue=queue,
        with_payload=False,
        lock=lock,
        fair_key=fair_key,
    )
    declared = task if isinstance(task, Task) else get_task(task)
    encoded = []
    for index, payload in enumerate(payloads):
        try:
            declared.check_payload(payload)
            encoded.append(declared.encode_payload(payload))
        except EnqueueError as error:
            raise type(error)(f"payloads[{index}]: {error}") from error
    if not encoded:
        return EnqueuedJobs([], jobs=[])
    from .db import queries_for  # Imports the model: see build_job.

    using = get_settings().database
    connection = connections[using]
    max_size = get_settings().queue_options(template.queue).max_size
    if max_size is None and fair_key is None:
        jobs = queries_for(connection).insert_jobs(connection, template, encoded)
    else:
        # All or nothing, as for a bad payload: the whole batch fits, or none of it is written.
        with transaction.atomic(using=using):
            if max_size is not None:
                _reserve_room(template.queue, max_size, len(encoded), using)
            if fair_key is not None:
                # The batch's jobs take consecutive rounds from this one.
                _assign_rounds(template, using)
            jobs = queries_for(connection).insert_jobs(connection, template, encoded)
    jobs_enqueued(using, [template.queue])
    if signals.job_enqueued.has_listeners():
        for job in jobs:
            signals.send(signals.job_enqueued, declared, job=job)
    return jobs


async def aenqueue(task: str | Task, payload: Any = None, **options: Any) -> Job:
    """``enqueue`` from async code: the same arguments, run in the thread Django's sync code
    of this request uses (``sync_to_async``, thread-sensitive). In an async view the job is
    written in its own transaction (autocommit), as an ORM write from async code is; to enqueue
    with other writes atomically, do both in one sync function under ``sync_to_async``."""
    return await sync_to_async(enqueue, thread_sensitive=True)(task, payload, **options)


async def aenqueue_many(task: str | Task, payloads: Iterable[Any], **options: Any) -> EnqueuedJobs:
    """``enqueue_many`` from async code (see ``aenqueue``)."""
    return await sync_to_async(enqueue_many, thread_sensitive=True)(task, payloads, **options)
