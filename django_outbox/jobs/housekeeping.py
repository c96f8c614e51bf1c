"""Acting on many jobs at once from outside a worker: retrying failed jobs, pruning old ones.

The logic of ``manage.py outbox_retry`` and ``outbox_prune`` (thin commands around these), with
the transitions the admin's retry action and the worker's pruner use: nothing here changes a job
another way.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import partial

from django.db import models, transaction
from django.db.models import Q

from ..conf import get_settings
from ..db import retry_while_locked
from ..django_task_jobs import of_task
from ..exceptions import JobNotFound, JobStateError
from ..models import FINISHED, Job, JobStatus
from .transitions import RETAINED, RETRYABLE, database_time_in, prune_finished, retry_failed

#: How long the pruner pauses between batches: claims and completions get the locks in between.
PRUNE_PAUSE = 0.05


def jobs_to_retry(
    *,
    ids: Collection[int] = (),
    queue: str | None = None,
    task: str | None = None,
    all_failed: bool = False,
    using: str | None = None,
) -> models.QuerySet[Job]:
    """Return the jobs the selectors name, all of them retryable; raise if none is given.

    ``ids`` may name failed or cancelled jobs; ``queue``, ``task`` and ``all_failed`` select
    failed jobs (a cancelled job was stopped on purpose: name it to retry it). Selectors given
    together narrow each other. Raise ValueError without a selector, JobNotFound for ids no job
    has, and JobStateError for named jobs that are not failed or cancelled: nothing is retried
    when a named job can't be.
    """
    if not (ids or queue or task or all_failed):
        raise ValueError("Say which jobs to retry: job ids, a queue, a task, or all failed jobs.")
    jobs = Job.objects.using(using or get_settings().database).order_by("id")
    if ids:
        jobs = jobs.filter(pk__in=sorted(set(ids)))
        found = dict(jobs.values_list("pk", "status"))
        if missing := sorted(set(ids) - found.keys()):
            raise JobNotFound(f"No job has id {', '.join(map(str, missing))}; nothing was retried.")
        if stuck := sorted(pk for pk, status in found.items() if status not in RETRYABLE):
            raise JobStateError(
                "Only failed or cancelled jobs can be retried; "
                + ", ".join(f"job {pk} is {found[pk]}" for pk in stuck)
                + ". Nothing was retried."
            )
    else:
        jobs = jobs.filter(status=JobStatus.FAILED)
    if queue:
        jobs = jobs.filter(queue=queue)
    if task:
        jobs = jobs.filter(of_task(task))
    return jobs.filter(status__in=RETRYABLE)


def retry_jobs(jobs: models.QuerySet[Job]) -> int:
    """Make ``jobs`` ready to run now, in one transaction; return how many."""
    with transaction.atomic(using=jobs.db):
        return retry_failed(jobs)


@dataclass(frozen=True)
class PruneCandidates:
    """What a prune would delete: finished jobs older than the limit, by status."""

    by_status: dict[str, int]
    # Among them, jobs another job depends on: kept while that job has not finished.
    with_dependents: int

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


def prune_retention(
    older_than: float, statuses: Sequence[str] = FINISHED
) -> dict[str, float | None]:
    """The RETENTION the worker's pruner takes, for finished ``statuses`` older than
    ``older_than`` seconds."""
    if not older_than > 0:
        raise ValueError(f"older_than must be a positive number of seconds, not {older_than!r}.")
    if unknown := [status for status in statuses if status not in FINISHED]:
        raise ValueError(
            "Only finished jobs are pruned (succeeded, failed, cancelled), not "
            f"{', '.join(unknown)}."
        )
    return {key: older_than if status in statuses else None for status, key in RETAINED}


def selection(queues: Sequence[str] = (), task: str | None = None) -> Q | None:
    """The jobs of ``queues`` (any when empty) and of ``task`` (an outbox task's name or a
    Django task's module path; any when None), or None for every job."""
    only = Q()
    if queues:
        only &= Q(queue__in=sorted(set(queues)))
    if task is not None:
        only &= of_task(task)
    return only or None


def prune_candidates(
    older_than: float,
    statuses: Sequence[str] = FINISHED,
    *,
    using: str | None = None,
    queues: Sequence[str] = (),
    task: str | None = None,
) -> PruneCandidates:
    """Count what ``prune`` would delete now (a dry run); it may keep some with dependents."""
    retention = prune_retention(older_than, statuses)
    jobs = Job.objects.using(using or get_settings().database)
    if (only := selection(queues, task)) is not None:
        jobs = jobs.filter(only)
    expired = jobs.filter(
        status__in=[status for status, key in RETAINED if retention[key] is not None],
        finished_at__lt=database_time_in(-older_than),
    )
    by_status = dict(expired.order_by().values_list("status").annotate(models.Count("pk")))
    return PruneCandidates(
        by_status={status: by_status.get(status, 0) for status in statuses},
        with_dependents=expired.filter(Q(has_dependents=True)).count(),
    )


def prune(
    older_than: float,
    statuses: Sequence[str] = FINISHED,
    *,
    batch_size: int = 500,
    using: str | None = None,
    pause: float = PRUNE_PAUSE,
    queues: Sequence[str] = (),
    task: str | None = None,
) -> int:
    """Delete the finished jobs of ``statuses`` older than ``older_than`` seconds (of
    ``queues`` and ``task``, when given: see ``selection``); return how many.

    In batches of ``batch_size`` per status, each its own short transaction that skips rows
    others hold locked (the worker's pruner's batches, ``transitions.prune_finished``), with a
    pause between them, so claims and completions never wait long behind it. Jobs that an
    unfinished job depends on are kept.
    """
    if not 0 < batch_size <= 100_000:
        raise ValueError(f"batch_size must be from 1 to 100,000, not {batch_size!r}.")
    retention = prune_retention(older_than, statuses)
    using = using or get_settings().database
    deleted = 0
    while True:
        batch = retry_while_locked(
            partial(prune_finished, using, retention, batch_size, selection(queues, task))
        )
        deleted += batch
        if not batch:
            return deleted
        time.sleep(pause)
