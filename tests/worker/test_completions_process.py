"""Batched completions and prefetch survive a SIGKILL: jobs claimed ahead, running, or finished
but not yet recorded run again after their lease expires; none is lost."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from django_outbox.models import Job, JobStatus
from django_outbox.tasks.enqueue import build_job
from tests.processes import SHORT_LEASE, read_runs, wait_until
from tests.testapp.tasks import record_run_non_atomic

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

COUNT = 300


def test_a_killed_worker_with_batched_completions_and_prefetch_loses_no_job(workers, log):
    jobs = Job.objects.bulk_create(
        [build_job(record_run_non_atomic, {"log": str(log), "sleep": 0.01}) for _ in range(COUNT)]
    )
    ids = {job.pk for job in jobs}
    first = workers("--concurrency", "4", OUTBOX_TEST_PREFETCH="60", **SHORT_LEASE)
    wait_until(
        lambda: Job.objects.succeeded().count() >= 40 or first.popen.poll() is not None,
        timeout=20,
        what="the first worker to finish some jobs",
    )

    first.send(signal.SIGKILL)
    assert first.wait(timeout=5) == -signal.SIGKILL
    succeeded_before = set(Job.objects.succeeded().values_list("pk", flat=True))
    held = set(Job.objects.running().values_list("pk", flat=True))
    never_claimed = set(
        Job.objects.filter(status=JobStatus.READY, attempts=0).values_list("pk", flat=True)
    )
    assert succeeded_before | held | never_claimed == ids
    assert len(succeeded_before) < COUNT, "the first worker finished every job"
    # It held far more jobs than it had threads: claimed ahead, or run and awaiting record.
    assert len(held) > 4, held

    second = workers("--concurrency", "4", OUTBOX_TEST_PREFETCH="60", **SHORT_LEASE)
    wait_until(
        lambda: Job.objects.succeeded().count() == COUNT or second.popen.poll() is not None,
        timeout=30,
        what=f"all {COUNT} jobs to succeed",
    )
    second.send(signal.SIGTERM)
    assert second.wait(timeout=15) == 0, second.stderr

    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == COUNT
    runs = read_runs(log)
    per_job = Counter(run.job_id for run in runs)
    # At least once: every job ran; a job recorded as succeeded never ran again.
    assert set(per_job) == ids
    assert all(per_job[job_id] == 1 for job_id in succeeded_before)
    assert {run.pid for run in runs if run.job_id in never_claimed} == {second.pid}
    # The held jobs were taken back after their lease expired, the lost attempt counted.
    rescued = Job.objects.filter(pk__in=held)
    assert set(rescued.values_list("attempts", flat=True)) == {2}
    assert all("Lease expired" in job.errors[0]["error"] for job in rescued)
    assert all(run.attempt == 2 for run in runs if run.job_id in held and run.pid == second.pid)
