"""Helpers the tests of every wing share: the repository's path, a worker run in this process."""

from __future__ import annotations

from pathlib import Path

from django.db.backends.base.base import BaseDatabaseWrapper

from django_outbox.worker.loop import Worker, WorkerStats

REPO = Path(__file__).resolve().parent.parent


def count_jobs_from(other: BaseDatabaseWrapper) -> int:
    with other.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM django_outbox_job")
        (count,) = cursor.fetchone()
    return int(count)


def run_worker(**options: object) -> WorkerStats:
    """Run a burst worker in this process until nothing is runnable."""
    options.setdefault("burst", True)
    options.setdefault("concurrency", 2)
    return Worker(**options).run()  # type: ignore[arg-type]
