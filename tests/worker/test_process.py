"""The worker command as a subprocess: draining, several processes, options and bad arguments.

Signals and crashes are in test_worker_signals.py.
"""

from __future__ import annotations

import re
import signal
from collections import Counter

import pytest

from django_outbox.models import Job, JobStatus
from django_outbox.tasks.enqueue import build_job
from tests.processes import read_runs, runs_per_job, wait_until
from tests.testapp.tasks import record_run

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def claimed_in(stdout: str) -> int:
    """Return how many jobs a worker's final stats line says it claimed."""
    match = re.search(r"stopped: (\d+) claimed: ", stdout)
    assert match, f"no stats line in stdout: {stdout!r}"
    return int(match.group(1))


def test_burst_runs_every_job_once_and_reports_stats(workers, log):
    jobs = [record_run.enqueue({"log": str(log), "sleep": 0.05}) for _ in range(20)]

    worker = workers("--burst", "--concurrency", "4", "--worker-id", "burst-1")

    assert worker.wait(timeout=30) == 0, worker.stderr
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})
    assert set(Job.objects.values_list("status", "attempts", "worker_id")) == {
        (JobStatus.SUCCEEDED, 1, "burst-1")
    }
    assert (
        "Worker burst-1 stopped: 20 claimed: 20 succeeded, 0 retrying, 0 failed, 0 lease lost."
        in worker.stdout
    )


def test_heartbeat_reports_no_lost_lease_for_jobs_that_finished(workers, log):
    """A job that succeeds while a heartbeat extends leases did not lose its lease."""
    for _ in range(200):
        record_run.enqueue({"log": str(log), "sleep": 0.01})

    # Frequent heartbeats (the floor) make the race with finishing jobs likely.
    worker = workers("--burst", "--concurrency", "4", OUTBOX_TEST_HEARTBEAT_SECONDS="0.1")

    assert worker.wait(timeout=30) == 0, worker.stderr
    assert Job.objects.filter(status=JobStatus.SUCCEEDED, attempts=1).count() == 200
    false_alarms = [line for line in worker.stderr.splitlines() if "lease lost job=" in line]
    assert not false_alarms, "\n".join(false_alarms)


@pytest.mark.parametrize(
    "count",
    [
        pytest.param(2000, marks=pytest.mark.postgresql, id="2000-jobs"),
        pytest.param(300, id="300-jobs"),
    ],
)
def test_two_processes_share_the_jobs_and_run_each_once(workers, log, count):
    first = workers("--concurrency", "4")
    second = workers("--concurrency", "4")
    # Both claim from the start: each is up and polling before the jobs appear.
    first.wait_for_output("worker started")
    second.wait_for_output("worker started")
    # Each job takes a few ms: a drain that ended within one poll of the other process would
    # leave it nothing to claim (seen once on SQLite, which wakes no other process).
    jobs = Job.objects.bulk_create(
        [build_job(record_run, {"log": str(log), "sleep": 0.005}) for _ in range(count)]
    )

    wait_until(
        lambda: (
            Job.objects.succeeded().count() == count
            or first.popen.poll() is not None
            or second.popen.poll() is not None
        ),
        timeout=60,
        what=f"{count} jobs to succeed",
    )
    first.send(signal.SIGTERM)
    second.send(signal.SIGTERM)

    assert first.wait(timeout=15) == 0, first.stderr
    assert second.wait(timeout=15) == 0, second.stderr
    assert "database is locked" not in first.stderr + second.stderr
    runs = read_runs(log)
    assert Counter(run.job_id for run in runs) == Counter({job.pk: 1 for job in jobs})
    assert {run.pid for run in runs} == {first.pid, second.pid}
    assert Job.objects.filter(status=JobStatus.SUCCEEDED, attempts=1).count() == count
    assert claimed_in(first.stdout) + claimed_in(second.stdout) == count


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--concurrency", "0"], "--concurrency: expected a number >= 1, got 0"),
        (["--concurrency", "two"], "--concurrency: expected a whole number, got 'two'"),
        (["--max-jobs", "-1"], "--max-jobs: expected a number >= 1, got -1"),
        (["--shutdown-timeout", "-1"], "--shutdown-timeout: expected seconds >= 0, got -1.0"),
        (["--queue", ""], "--queue: A queue name must be a non-empty string, not ''."),
        (["--queue", "   "], "--queue: A queue name must be a non-empty string, not '   '."),
    ],
    ids=[
        "concurrency-0",
        "concurrency-text",
        "max-jobs-negative",
        "shutdown-timeout-negative",
        "queue-empty",
        "queue-blank",
    ],
)
def test_bad_arguments_exit_with_a_message_and_touch_no_job(workers, log, arguments, message):
    job = record_run.enqueue({"log": str(log)})

    worker = workers("--burst", *arguments)

    assert worker.wait(timeout=30) != 0
    assert message in worker.stderr
    assert "Traceback" not in worker.stderr
    job.refresh_from_db()
    assert (job.status, job.attempts, job.worker_id) == (JobStatus.READY, 0, "")
    assert not log.exists()


def test_queue_option_runs_only_that_queue(workers, log):
    emails = [record_run.enqueue({"log": str(log)}, queue="emails") for _ in range(3)]
    others = [
        record_run.enqueue({"log": str(log)}),
        record_run.enqueue({"log": str(log)}, queue="reports"),
    ]

    worker = workers("--burst", "--queue", "emails")

    assert worker.wait(timeout=30) == 0, worker.stderr
    assert runs_per_job(log) == Counter({job.pk: 1 for job in emails})
    assert set(Job.objects.succeeded().values_list("pk", flat=True)) == {j.pk for j in emails}
    assert set(
        Job.objects.filter(status=JobStatus.READY, attempts=0).values_list("pk", flat=True)
    ) == {job.pk for job in others}


def test_several_queue_options_run_each_of_those_queues(workers, log):
    wanted = [
        record_run.enqueue({"log": str(log)}, queue="emails"),
        record_run.enqueue({"log": str(log)}, queue="reports"),
    ]
    other = record_run.enqueue({"log": str(log)})

    worker = workers("--burst", "--queue", "emails", "--queue", "reports")

    assert worker.wait(timeout=30) == 0, worker.stderr
    assert runs_per_job(log) == Counter({job.pk: 1 for job in wanted})
    other.refresh_from_db()
    assert (other.status, other.attempts) == (JobStatus.READY, 0)


def test_max_jobs_exits_after_that_many_jobs(workers, log):
    for _ in range(5):
        record_run.enqueue({"log": str(log)})

    # No --burst: only --max-jobs ends this worker, and it claims no more than it may run.
    worker = workers("--max-jobs", "2", "--concurrency", "4")

    assert worker.wait(timeout=30) == 0, worker.stderr
    assert sum(runs_per_job(log).values()) == 2
    assert Job.objects.filter(status=JobStatus.SUCCEEDED, attempts=1).count() == 2
    assert Job.objects.filter(status=JobStatus.READY, attempts=0).count() == 3
    assert "2 claimed: 2 succeeded" in worker.stdout
