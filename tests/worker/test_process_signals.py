"""The worker command as a subprocess, stopped by signals or killed: no job is lost or doubled."""

from __future__ import annotations

import datetime
import signal
import time
from collections import Counter

import pytest

from django_outbox.models import Job, JobStatus
from tests.processes import SHORT_LEASE, read_runs, runs_per_job, wait_until
from tests.testapp.tasks import record_run, sleeps_on_first_attempt

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def wait_until_running(job: Job, log, worker) -> None:
    """Wait until ``job`` is claimed and its handler has started (it wrote its log line)."""
    wait_until(
        lambda: (
            (
                Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).exists()
                and runs_per_job(log)[job.pk] > 0
            )
            or worker.popen.poll() is not None
        ),
        timeout=15,
        what=f"job {job.pk} to run",
    )
    assert worker.popen.poll() is None, f"worker exited early; stderr:\n{worker.stderr}"


def test_killed_worker_job_is_taken_back_after_its_lease_expires(workers, log):
    job = sleeps_on_first_attempt.enqueue({"log": str(log), "sleep": 30})
    first = workers("--concurrency", "1", **SHORT_LEASE)
    wait_until_running(job, log, first)

    first.send(signal.SIGKILL)
    assert first.wait(timeout=5) == -signal.SIGKILL
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)
    lease_expired_at = job.lease_expires_at
    assert lease_expired_at is not None
    # Started at once, it must leave the job alone until the lease has expired.
    second = workers("--max-jobs", "1")

    assert second.wait(timeout=20) == 0, second.stderr
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
    [lost] = job.errors
    assert lost["attempt"] == 1
    assert "Lease expired" in lost["error"]
    assert datetime.datetime.fromisoformat(lost["at"]) >= lease_expired_at
    assert [(run.attempt, run.pid) for run in read_runs(log)] == [(1, first.pid), (2, second.pid)]


def test_sigterm_finishes_running_jobs_and_hands_back_the_rest(workers, log):
    jobs = [record_run.enqueue({"log": str(log), "sleep": 0.5}) for _ in range(30)]
    worker = workers("--concurrency", "4", "--shutdown-timeout", "10")
    wait_until(lambda: len(read_runs(log)) >= 2, timeout=15, what="two jobs to start")

    worker.send(signal.SIGTERM)
    sent_at = time.monotonic()

    assert worker.wait(timeout=15) == 0, worker.stderr
    assert time.monotonic() - sent_at < 10
    assert "Received SIGTERM" in worker.stderr
    assert not Job.objects.running().exists()
    started = set(runs_per_job(log))
    succeeded = set(Job.objects.succeeded().values_list("pk", flat=True))
    handed_back = set(
        Job.objects.filter(status=JobStatus.READY, attempts=0, worker_id="").values_list(
            "pk", flat=True
        )
    )
    assert succeeded == started
    assert handed_back, "every job ran before the signal: the test proved nothing"
    assert succeeded | handed_back == {job.pk for job in jobs}
    assert len(succeeded) + len(handed_back) == 30

    rest = workers("--burst", "--concurrency", "4")

    assert rest.wait(timeout=30) == 0, rest.stderr
    assert Job.objects.filter(status=JobStatus.SUCCEEDED, attempts=1).count() == 30
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})


def test_second_signal_exits_at_once_leaving_the_job_to_its_lease(workers, log):
    job = sleeps_on_first_attempt.enqueue({"log": str(log), "sleep": 60})
    first = workers("--concurrency", "1", **SHORT_LEASE)
    wait_until_running(job, log, first)

    first.send(signal.SIGTERM)
    first.wait_for_output("Received SIGTERM")
    first.send(signal.SIGTERM)
    sent_at = time.monotonic()

    assert first.wait(timeout=10) == 128 + signal.SIGTERM
    assert time.monotonic() - sent_at < 2
    assert "again: exiting at once" in first.stderr
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)
    assert job.lease_token is not None

    second = workers("--max-jobs", "1")

    assert second.wait(timeout=20) == 0, second.stderr
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
    assert "Lease expired" in job.errors[0]["error"]


@pytest.mark.parametrize(
    ("max_attempts", "status"), [(5, JobStatus.RETRYING), (1, JobStatus.FAILED)]
)
def test_shutdown_timeout_gives_up_on_a_job_still_running(workers, log, max_attempts, status):
    job = sleeps_on_first_attempt.enqueue({"log": str(log), "sleep": 30})
    Job.objects.filter(pk=job.pk).update(max_attempts=max_attempts)
    worker = workers("--concurrency", "1", "--shutdown-timeout", "1")
    wait_until_running(job, log, worker)

    worker.send(signal.SIGTERM)
    sent_at = time.monotonic()

    assert worker.wait(timeout=8) == 0, worker.stderr
    assert 0.9 < time.monotonic() - sent_at < 5
    job.refresh_from_db()
    assert (job.status, job.attempts, job.lease_token) == (status, 1, None)
    assert "shut down after waiting 1.0s" in job.last_error
    assert [entry["attempt"] for entry in job.errors] == [1]
    if status == JobStatus.FAILED:
        return

    # Retrying at once (retry delays are 0 in the tests): the next worker runs it again.
    again = workers("--burst")

    assert again.wait(timeout=20) == 0, again.stderr
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
