"""Helpers the tests of every wing share: the repository's path, a worker run in this process,
the default connection moved to a database of a test's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
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


@contextmanager
def default_connection_on(**changes: str) -> Iterator[None]:
    """Point the default connection at another database (``HOST``, ``PORT``, ``NAME``,
    ``USER``: what ``changes`` gives), migrated; put it back afterwards."""
    settings = connection.settings_dict
    kept = {key: settings[key] for key in changes}
    connection.close()
    settings.update(changes)
    try:
        call_command("migrate", verbosity=0, database="default")
        yield
    finally:
        connection.close()
        settings.update(kept)
        # The content types the migration cached are the other database's rows: the next
        # test's flush would write permissions for ids the suite's database does not have.
        ContentType.objects.clear_cache()
