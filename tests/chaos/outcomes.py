"""Helpers of the fault-injection suite (``pytest -m chaos``; ``make chaos`` for the long run).

``make test`` runs it at CI size; ``OUTBOX_CHAOS_SCALE=full`` runs the full sizes
(10,000 jobs and 50 kills, 50,000 jobs on 4 x 8 threads, a 10 s database outage, 20,000
messages with 100 relay kills and 10 broker restarts per broker, RabbitMQ's included, and
every broker down for 10 minutes).
``OUTBOX_CHAOS_REPORT=FILE`` appends each test's figures to FILE as JSON lines.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count

from django_outbox.models import Job, JobStatus
from tests.processes import WorkerProcess, wait_until
from tests.testapp import tasks
from tests.testapp.models import Note

FULL = os.environ.get("OUTBOX_CHAOS_SCALE") == "full"


def scaled(ci: int, full: int) -> int:
    return full if FULL else ci


def report(test: str, **figures: Any) -> None:
    """Record a test's figures for docs/reliability.md."""
    path = os.environ.get("OUTBOX_CHAOS_REPORT")
    if path:
        with Path(path).open("a") as out:
            out.write(
                json.dumps({"test": test, "scale": "full" if FULL else "ci", **figures}) + "\n"
            )


def check_outcomes(atomic_ids: list[int], non_atomic_ids: list[int]) -> dict[str, int]:
    """Assert every job succeeded, each atomic job's write committed once, and every duplicate
    run of a non-atomic job is explained by a taken-back attempt. Return the figures."""
    statuses = Counter(Job.objects.values_list("status", flat=True))
    assert statuses == Counter({JobStatus.SUCCEEDED: len(atomic_ids) + len(non_atomic_ids)}), (
        statuses
    )
    notes = dict(
        Note.objects.values("job_id").annotate(count=Count("id")).values_list("job_id", "count")
    )
    atomic_twice = {job_id: notes.get(job_id, 0) for job_id in atomic_ids if notes.get(job_id) != 1}
    assert not atomic_twice, f"atomic jobs whose write did not commit exactly once: {atomic_twice}"
    attempts = dict(Job.objects.values_list("pk", "attempts"))
    duplicates = 0
    for job_id in non_atomic_ids:
        runs = notes.get(job_id, 0)
        assert 1 <= runs <= attempts[job_id], (job_id, runs, attempts[job_id])
        duplicates += runs - 1
    retaken = sum(1 for count in attempts.values() if count > 1)
    return {
        "duplicates": duplicates,
        "jobs_retaken": retaken,
        "max_attempts": max(attempts.values()),
    }


def left_behind(workers: Sequence[WorkerProcess], jobs: int = 10, lines: int = 40) -> str:
    """What a drain that did not end left: the jobs by status, the first unfinished ones, and
    whether each worker runs, with its last log lines (a failure under load says why)."""
    statuses = Counter(Job.objects.values_list("status", flat=True))
    unfinished = Job.objects.unfinished().order_by("pk")[:jobs]
    rows = "\n".join(
        f"  job {job.pk} {job.status} attempts={job.attempts} run_at={job.run_at} "
        f"lease_expires_at={job.lease_expires_at} worker={job.worker_id}"
        for job in unfinished
    )
    logs = "\n".join(
        f"worker {worker.pid} ({'running' if worker.popen.poll() is None else 'exited'}):\n"
        + "\n".join(worker.stderr.splitlines()[-lines:])
        for worker in workers
    )
    return f"jobs by status: {dict(statuses)}\nfirst unfinished:\n{rows}\n{logs}"


def ride_out_outage(
    stop: Callable[[], None],
    start: Callable[[], None],
    outage: int,
    *,
    atomic: list[int],
    non_atomic: list[int],
    workers: Sequence[WorkerProcess],
    succeeded: Callable[[], int],
    timeout: int,
) -> dict[str, Any]:
    """Stop the database server for ``outage`` seconds while ``workers`` drain ``atomic`` and
    ``non_atomic`` jobs, enqueue more the moment it is back, and wait until every job
    succeeded: the workers alive, each having logged that it works again. Return the figures
    (``check_outcomes``', the jobs in all and how soon a job succeeded after the start)."""
    stop()
    time.sleep(outage)
    start()
    back_at = time.monotonic()
    # New work as soon as the server is back, whatever is left of the first.
    atomic += [job.pk for job in tasks.chaos_atomic.enqueue_many([{}] * 100)]
    jobs = len(atomic) + len(non_atomic)
    done_before = succeeded()
    wait_until(lambda: succeeded() > done_before, timeout=60, what="a job to succeed again")
    reconnected_in = time.monotonic() - back_at
    try:
        wait_until(lambda: succeeded() == jobs, timeout=timeout, what="every job")
        finished = True
    except pytest.fail.Exception:
        finished = False
    if not finished:
        # Outside the except block: the report, not wait_until's own failure, is what is shown.
        pytest.fail(f"timed out after {timeout}s waiting for every job\n{left_behind(workers)}")
    for worker in workers:
        assert worker.popen.poll() is None, f"a worker died:\n{worker.stderr}"
        assert "works again" in worker.stderr
    assert not Job.objects.unfinished().exists()
    return {
        "jobs": jobs,
        "reconnected_in_s": round(reconnected_in, 2),
        **check_outcomes(atomic, non_atomic),
    }
