"""Fault injection: a job's row locked by another transaction while workers run it.

An operator's ``SELECT ... FOR UPDATE`` in psql, or an application's long transaction, holds
one running job's row for longer than the lease. The workers must go on running the other jobs
(no heartbeat or completion waits for that row), must not run the locked job a second time
while its handler still runs, and must finish it once the row is free. PostgreSQL and MariaDB:
SQLite has no row locks.
"""

from __future__ import annotations

import signal
import time

import pytest

from django_outbox.models import Job, JobStatus
from tests.chaos.outcomes import check_outcomes, report, scaled
from tests.processes import SHORT_LEASE, wait_until
from tests.testapp import tasks
from tests.worker.helpers import row_locked

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.process,
    pytest.mark.row_locks,
    pytest.mark.django_db(transaction=True),
]


def test_a_row_locked_past_its_lease_stalls_no_worker_and_runs_no_job_twice(workers):
    lock_seconds = scaled(8, 60)
    jobs = scaled(60, 400)
    ids = [job.pk for job in tasks.chaos_non_atomic.enqueue_many([{"sleep": 2.0}] * jobs)]
    started = [workers("--worker-id", f"w{n}", "--concurrency", "4", **SHORT_LEASE) for n in (1, 2)]
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.RUNNING).exists(),
        timeout=30,
        what="a job to run",
    )
    victim = Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", flat=True).first()
    assert victim is not None
    began = time.monotonic()
    with row_locked(victim):
        done_before = Job.objects.filter(status=JobStatus.SUCCEEDED).count()
        time.sleep(lock_seconds)
        done_during = Job.objects.filter(status=JobStatus.SUCCEEDED).count() - done_before
        assert Job.objects.get(pk=victim).status == JobStatus.RUNNING
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == jobs,
        timeout=scaled(120, 600),
        what="every job to succeed",
    )
    drained_after_release = time.monotonic() - began - lock_seconds
    for process in started:
        process.send(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, process.stderr
    figures = check_outcomes([], ids)
    # Two workers x 4 threads, 2 s jobs: about 4 a second while the row is locked.
    assert done_during >= lock_seconds, done_during
    assert figures["duplicates"] == 0, figures
    assert figures["jobs_retaken"] == 0, figures
    stderr = "".join(process.stderr for process in started)
    assert "lease expired while its row was locked" in stderr
    report(
        "row-lock",
        jobs=jobs,
        lock_seconds=lock_seconds,
        lease_seconds=2,
        succeeded_while_locked=done_during,
        drained_after_release=round(drained_after_release, 1),
        **figures,
    )
