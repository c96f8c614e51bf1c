"""What the reference suite imports from its own backend, over the outbox's tables.

``DBTaskResult.objects`` is a queryset of the jobs with the reference model's
questions (``ready()``, ``successful()``...) and field names in ``update()`` and ``create()``,
so that the tests' bodies stay as they are. ``run_worker`` is ``db_worker``'s call with
``run_outbox_worker``'s options.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from io import StringIO
from typing import TYPE_CHECKING, Any

import django
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from django_outbox.backends import TASK_NAME, OutboxBackend
from django_outbox.models import CLAIMABLE, FINISHED, Job, JobStatus

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus
else:
    from django_tasks import TaskResultStatus

#: The reference's backend class, in its tests' assertions.
DatabaseBackend = OutboxBackend

STATUSES = {
    TaskResultStatus.READY: JobStatus.READY,
    TaskResultStatus.RUNNING: JobStatus.RUNNING,
    TaskResultStatus.SUCCESSFUL: JobStatus.SUCCEEDED,
    TaskResultStatus.FAILED: JobStatus.FAILED,
}


class DBTaskResultQuerySet(QuerySet[Job]):
    """Jobs, asked as the reference's DBTaskResult is."""

    def ready(self) -> DBTaskResultQuerySet:
        return self.filter(status__in=CLAIMABLE, run_at__lte=Now())

    def running(self) -> DBTaskResultQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def successful(self) -> DBTaskResultQuerySet:
        return self.filter(status=JobStatus.SUCCEEDED)

    def failed(self) -> DBTaskResultQuerySet:
        return self.filter(status=JobStatus.FAILED)

    def finished(self) -> DBTaskResultQuerySet:
        return self.filter(status__in=FINISHED)

    def update(self, **changes: Any) -> int:
        columns: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "status":
                columns["status"] = STATUSES[value]
                if value == TaskResultStatus.RUNNING:
                    # A running job holds a lease (constraint outbox_job_running_has_lease).
                    columns.setdefault("lease_token", uuid.uuid4())
                    columns.setdefault("lease_expires_at", timezone.now() + timedelta(hours=1))
            elif name == "worker_ids":
                # One worker per attempt: the job keeps its latest, and counts them.
                columns["worker_id"] = value[-1] if value else ""
                columns["attempts"] = len(value)
            elif name == "run_after":
                columns["run_at"] = value
            else:
                columns[name] = value
        return super().update(**columns)

    async def aupdate(self, **changes: Any) -> int:
        return await sync_to_async(self.update)(**changes)

    def create(self, **fields: Any) -> Job:  # type: ignore[override]
        # A row written by hand, naming a task by its path, as the reference's tests write one.
        args_kwargs = fields.pop("args_kwargs")
        return Job.objects.create(
            task_name=TASK_NAME,
            queue="default",
            max_attempts=1,
            payload={"task": fields.pop("task_path"), **args_kwargs},
        )


class _Objects:
    def __getattr__(self, name: str) -> Any:
        # Every job: these tests write only Django tasks' jobs, and two of them run the
        # queryset's SQL as text (str(query)), which holds no quoted parameters.
        return getattr(DBTaskResultQuerySet(model=Job), name)


class DBTaskResult:
    objects: Any = _Objects()


def run_worker(
    *,
    verbosity: int = 0,
    batch: bool = True,
    worker_id: str | None = None,
    queue_name: str = "default",
    exclude_queues: str | None = None,
    max_tasks: int | None = None,
    stdout: StringIO | None = None,
    stderr: StringIO | None = None,
    **unsupported: Any,
) -> None:
    """``call_command("db_worker", ...)`` as ``run_outbox_worker``: ``queue_name`` is a comma
    list ("*": every queue), ``exclude_queues`` too, ``batch`` is ``--burst``, ``max_tasks``
    is ``--max-jobs``. ``interval`` and ``startup_delay`` have no equivalent (the outbox's
    poll interval is a setting; it starts at once)."""
    unsupported.pop("interval", None)
    unsupported.pop("startup_delay", None)
    assert not unsupported, f"run_outbox_worker has no option for {sorted(unsupported)}"
    args = ["--concurrency", "1"]
    if batch:
        args.append("--burst")
    if worker_id is not None:
        args += ["--worker-id", worker_id]
    if queue_name != "*":
        for name in queue_name.split(","):
            args += ["--queue", name]
    for name in (exclude_queues or "").split(","):
        if name:
            args += ["--exclude-queue", name]
    if max_tasks is not None:
        args += ["--max-jobs", str(max_tasks)]
    call_command(
        "run_outbox_worker",
        *args,
        verbosity=verbosity,
        stdout=stdout or StringIO(),
        stderr=stderr or StringIO(),
    )


def _age(days: float) -> str:
    # outbox_prune takes durations over 0: "0 days" is a millisecond (jobs finished before
    # the command are older than that).
    return f"{days}d" if days > 0 else "0.001"


def prune_task_results(
    *,
    min_age_days: float = 14,
    failed_min_age_days: float | None = None,
    queue_name: str = "default",
    dry_run: bool = False,
    verbosity: int = 1,
    stdout: StringIO | None = None,
) -> None:
    """``call_command("prune_db_task_results", ...)`` as ``outbox_prune``: its ages in days,
    ``queue_name`` a comma list ("*": every queue). A failed job's own age is a second run, for
    failed jobs only (``--status``)."""
    selection = [] if queue_name == "*" else [f"--queue={name}" for name in queue_name.split(",")]
    if dry_run:
        selection.append("--dry-run")
    out = stdout or StringIO()
    runs: list[tuple[float, list[str]]]
    if failed_min_age_days is None:
        runs = [(min_age_days, [])]
    else:
        runs = [
            (min_age_days, ["--status=succeeded", "--status=cancelled"]),
            (failed_min_age_days, ["--status=failed"]),
        ]
    if any(days <= 0 for days, _ in runs):
        # "0 days" is a millisecond (_age), by the database's clock, which SQLite reads to the
        # millisecond: a job marked finished just before must be older than that.
        time.sleep(0.005)
    for days, statuses in runs:
        call_command(
            "outbox_prune",
            f"--older-than={_age(days)}",
            *statuses,
            *selection,
            verbosity=verbosity,
            stdout=out,
        )
