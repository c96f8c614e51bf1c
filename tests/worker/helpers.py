"""Helpers of the worker's tests: claims made by hand, leases expired by hand."""

import datetime

from django.db import connection
from django.utils import timezone

from django_outbox.db import queries_for
from django_outbox.models import Job


def claim(limit=10, queues=None, worker_id="test-worker", lease_seconds=30.0):
    return queries_for(connection).claim(connection, worker_id, queues, limit, lease_seconds)


def expire(job_id, attempts):
    Job.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1), attempts=attempts
    )
