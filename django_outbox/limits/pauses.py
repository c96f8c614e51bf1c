"""Pausing a limit when a handler raises ``RateLimited``: no job of it starts until then."""

from __future__ import annotations

import math

from django.db import connections
from django.db.models import Q

from ..claimed import ClaimedJob
from ..db import queries_for
from ..models import Job, LimitState
from .declared import QUEUE, TASK, Scope

#: ``RateLimited(per=...)``: which of the job's limits pauses.
PER = ("key", "task", "queue")


def paused_scope(job: ClaimedJob, per: str | None, limit_key: str | None) -> Scope:
    """Return the scope a ``RateLimited(per=per)`` of ``job`` (with ``limit_key``) pauses:
    its key's (by default, when it has a key), its task's or its queue's."""
    if per is None:
        per = "key" if limit_key else "task"
    if per == "queue":
        return Scope(QUEUE, job.queue)
    if per == "key" and limit_key:
        return Scope(TASK, job.task_name, limit_key)
    return Scope(TASK, job.task_name)


def pause(using: str, job: ClaimedJob, seconds: float, per: str | None) -> Scope:
    """Pause the limit ``job``'s ``RateLimited`` names for ``seconds`` (a pause already
    longer stays); return its scope."""
    limit_key = Job.objects.using(using).filter(pk=job.id).values_list("limit_key", flat=True)
    scope = paused_scope(job, per, next(iter(limit_key), None))
    connection = connections[using]
    queries = queries_for(connection)
    with queries.write_transaction(connection):
        until = queries.database_seconds(connection) + seconds
        LimitState.objects.using(using).bulk_create(
            [LimitState(kind=scope.kind, name=scope.name, key=scope.key)], ignore_conflicts=True
        )
        LimitState.objects.using(using).filter(
            Q(paused_until__isnull=True) | Q(paused_until__lt=until),
            kind=scope.kind,
            name=scope.name,
            key=scope.key,
        ).update(paused_until=until if math.isfinite(until) else None)
    return scope
