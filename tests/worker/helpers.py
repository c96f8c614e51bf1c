"""Helpers of the worker's tests: claims made by hand, leases expired by hand."""

import contextlib
import datetime

from django.db import connection, connections
from django.utils import timezone

from django_outbox.db import queries_for
from django_outbox.models import Job


def claim(limit=10, queues=None, worker_id="test-worker", lease_seconds=30.0):
    return queries_for(connection).claim(connection, worker_id, queues, limit, lease_seconds)


def expire(job_id, attempts):
    Job.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1), attempts=attempts
    )


@contextlib.contextmanager
def row_locked(job_id):
    """Hold ``job_id``'s row with ``SELECT ... FOR UPDATE`` from another connection, as an
    operator in psql or the mariadb client would, until the block ends."""
    other = connections.create_connection(connection.alias)
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {Job._meta.db_table} WHERE id = %s FOR UPDATE", [job_id]
            )
        yield other
        other.rollback()
    finally:
        other.close()


def lease_of(job_id):
    return Job.objects.values_list("lease_expires_at", flat=True).get(pk=job_id)
