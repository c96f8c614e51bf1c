"""Asserting what a test enqueued."""

from __future__ import annotations

from typing import Any

from ..conf import get_settings
from ..models import CLAIMABLE, Job
from ..tasks.base import Task

#: Leave out to match any payload.
ANY = object()


def enqueued_jobs(
    task: Task | str | None = None, *, payload: Any = ANY, queue: str | None = None
) -> list[Job]:
    """Return the jobs waiting to run (ready or retrying), oldest first, that match: of
    ``task`` (a Task or its name), with ``payload`` (compared with the decoded payload), in
    ``queue``."""
    jobs = Job.objects.using(get_settings().database).filter(status__in=CLAIMABLE)
    if task is not None:
        jobs = jobs.filter(task_name=task.name if isinstance(task, Task) else task)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    found = list(jobs.order_by("id"))
    if payload is not ANY:
        found = [job for job in found if job.decoded_payload() == payload]
    return found


def _describe(task: Task | str | None, payload: Any, queue: str | None) -> str:
    parts = [f"task {task.name if isinstance(task, Task) else task!r}" if task else "any task"]
    if payload is not ANY:
        parts.append(f"payload {payload!r}")
    if queue is not None:
        parts.append(f"queue {queue!r}")
    return ", ".join(parts)


def assert_enqueued(
    task: Task | str | None = None,
    *,
    payload: Any = ANY,
    queue: str | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that jobs matching the arguments wait to run: ``count`` of them, or at least one.
    Return them."""
    found = enqueued_jobs(task, payload=payload, queue=queue)
    wanted = f"{count}" if count is not None else "at least 1"
    if (count is None and not found) or (count is not None and len(found) != count):
        waiting = [
            (job.pk, job.task_name, job.queue, job.decoded_payload())
            for job in enqueued_jobs(queue=queue)[:20]
        ]
        raise AssertionError(
            f"Expected {wanted} enqueued job(s) of {_describe(task, payload, queue)}, found "
            f"{len(found)}. Waiting jobs (id, task, queue, payload), up to 20: {waiting}"
        )
    return found


def assert_not_enqueued(
    task: Task | str | None = None, *, payload: Any = ANY, queue: str | None = None
) -> None:
    """Assert that no job matching the arguments waits to run."""
    found = enqueued_jobs(task, payload=payload, queue=queue)
    if found:
        raise AssertionError(
            f"Expected no enqueued job of {_describe(task, payload, queue)}, found "
            f"{len(found)}: ids {[job.pk for job in found]}"
        )
