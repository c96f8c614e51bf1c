"""Inserting jobs through the outbox database's connection, in the caller's transaction.

No ``on_commit`` and no second connection: inside ``atomic()`` the job commits or rolls back
with the caller's other writes; outside, it autocommits like any ORM write. The jobs come
checked and built (``Task.build_job``); what is checked here needs the table: a unique key
already taken, a queue already full, jobs depended on that do not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from ..conf import get_settings
from ..db import queries_for
from ..exceptions import DuplicateJob, EnqueueError, QueueFull
from ..validation.text import brief
from .batch import EnqueuedJobs
from .wakeups import jobs_enqueued

if TYPE_CHECKING:
    from ..models import Job


def insert_job(
    job: Job,
    *,
    parents: Sequence[int] = (),
    unique_key: str | None = None,
    unique_while: str = "pending",
    on_duplicate: str = "return",
) -> Job:
    """Insert the unsaved ``job`` and return it; with ``unique_key`` taken, return the job
    that holds it instead (``is_duplicate``), or raise DuplicateJob (``on_duplicate="raise"``).

    ``parents`` are the ids of the jobs it depends on (``options.dependency_ids``). Into a queue
    whose ``MAX_SIZE`` is reached, raise QueueFull: nothing written, and the caller's
    transaction stays usable.
    """
    using = get_settings().database
    connection = connections[using]
    queries = queries_for(connection)
    max_size = get_settings().queue_options(job.queue).max_size
    if unique_key is None and max_size is None and not parents:
        if job.fair_key is None:
            queries.insert_job(connection, job)
        else:
            # No savepoint: nothing here is an error the caller could go on after.
            with transaction.atomic(using=using, savepoint=False):
                _serialize_key_enqueuers(job, using)
                queries.insert_job(connection, job)
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
    return job


def insert_jobs(template: Job, payloads: Sequence[Any]) -> EnqueuedJobs:
    """Insert one job like ``template`` per (encoded) payload, in one INSERT where the database
    allows, and return them. All or nothing: a batch that does not fit its queue's
    ``MAX_SIZE`` raises QueueFull, nothing written."""
    if not payloads:
        return EnqueuedJobs([], jobs=[])
    using = get_settings().database
    connection = connections[using]
    queries = queries_for(connection)
    max_size = get_settings().queue_options(template.queue).max_size
    if max_size is None and template.fair_key is None:
        inserted = queries.insert_jobs(connection, template, payloads)
    else:
        with transaction.atomic(using=using):
            if max_size is not None:
                _reserve_room(template.queue, max_size, len(payloads), using)
            if template.fair_key is not None:
                # The batch's jobs take consecutive rounds from the first one's.
                _serialize_key_enqueuers(template, using)
                template.fair_round = queries.first_fair_round(
                    connection, template.queue, template.fair_key
                )
            inserted = queries.insert_jobs(connection, template, payloads)
    jobs_enqueued(using, [template.queue])
    if inserted.jobs is not None:
        return EnqueuedJobs.from_jobs(inserted.jobs)
    # A database that does not build the jobs says when it enqueued them, to build them later.
    assert inserted.enqueued_at is not None
    return EnqueuedJobs.from_rows(template, payloads, inserted.ids, inserted.enqueued_at, using)


def _insert_checked(
    job: Job, unique_while: str, max_size: int | None, parents: Sequence[int], using: str
) -> Job | None:
    """Insert ``job`` if its unique key is free and its queue has room; return the job that
    holds the key instead (nothing inserted), or raise QueueFull.

    Enqueuers that check wait for each other (``serialize_enqueuers``) until the first one's
    transaction ends, so no two of them both find the key free or the last place empty.
    """
    from ..models import PENDING, Job, JobDependency, JobStatus  # See options.dependency_ids.

    connection = connections[using]
    queries = queries_for(connection)
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
    from ..models import Job  # See options.dependency_ids.

    connection = connections[using]
    queries_for(connection).serialize_enqueuers(connection, f"queue:{queue}")
    # Along the claim indexes (fair and limited jobs have their own), and no further than the
    # limit: a full queue costs max_size rows.
    claimable = Job.objects.using(using).claimable().filter(queue=queue)
    unlimited = claimable.filter(limit_key__isnull=True)
    waiting = unlimited.filter(fair_key__isnull=True)[:max_size].count()
    waiting += unlimited.filter(fair_key__isnull=False)[:max_size].count()
    waiting += claimable.filter(limit_key__isnull=False)[:max_size].count()
    if waiting + adding > max_size:
        raise QueueFull(queue, waiting, max_size, adding)


def _serialize_key_enqueuers(template: Job, using: str) -> None:
    """Make the other enqueuers of ``template``'s fair key wait until this transaction ends, so
    that no two of them take the same round."""
    connection = connections[using]
    queries_for(connection).serialize_enqueuers(
        connection, f"fair:{template.queue}:{template.fair_key}"
    )
