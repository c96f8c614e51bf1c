"""``run_outbox_worker --processes P``: one supervisor, P worker processes, clean stops."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from django_outbox import enqueue_many
from django_outbox.models import Job, JobStatus
from tests.processes import child_pids, is_running, read_runs, wait_until
from tests.testapp.tasks import record_run

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_processes_share_the_jobs_run_each_once_and_exit_when_done(workers, log):
    # The first jobs wait until both processes have run one: on a loaded machine the first
    # process to start could otherwise drain all 300 before the second one claims any.
    jobs = enqueue_many(record_run, [{"log": str(log), "until_processes": 2} for _ in range(300)])
    supervisor = workers("--processes", "2", "--concurrency", "2", "--burst")

    assert supervisor.wait(timeout=60) == 0, supervisor.stderr
    runs = read_runs(log)
    again = [run for run in runs if [r.job_id for r in runs].count(run.job_id) > 1]
    assert not again, f"ran again: {again}\nthe workers' log:\n{supervisor.stderr}"
    assert Counter(run.job_id for run in runs) == Counter({job.pk: 1 for job in jobs})
    # Two worker processes ran them, neither of them the supervisor.
    pids = {run.pid for run in runs}
    assert pids == set(child_pids(supervisor).values())
    assert len(pids) == 2
    assert supervisor.pid not in pids
    assert Job.objects.filter(status=JobStatus.SUCCEEDED, attempts=1).count() == 300
    assert "All 2 worker processes stopped." in supervisor.stdout


def test_sigterm_stops_every_process_gracefully_and_loses_nothing(workers, log):
    jobs = enqueue_many(record_run, [{"log": str(log), "sleep": 0.5} for _ in range(40)])
    supervisor = workers("--processes", "2", "--concurrency", "2")
    wait_until(lambda: len(read_runs(log)) >= 4, timeout=30, what="jobs to start")
    children = child_pids(supervisor).values()

    supervisor.send(signal.SIGTERM)

    assert supervisor.wait(timeout=30) == 0, supervisor.stderr
    assert not any(is_running(pid) for pid in children)
    # Every job either ran once and succeeded, or was handed back unstarted; none is left
    # running, and none ran twice.
    runs = Counter(run.job_id for run in read_runs(log))
    assert set(runs.values()) == {1}
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert len(statuses) == len(jobs)
    for job_id, status in statuses.items():
        expected = JobStatus.SUCCEEDED if job_id in runs else JobStatus.READY
        assert status == expected, (job_id, status)


def test_a_worker_process_that_dies_is_restarted(workers, log):
    supervisor = workers("--processes", "2", "--concurrency", "1")
    wait_until(lambda: len(child_pids(supervisor)) == 2, timeout=30, what="two workers")
    first = child_pids(supervisor)[1]

    os.kill(first, signal.SIGKILL)

    wait_until(
        lambda: child_pids(supervisor)[1] != first, timeout=30, what="worker 1 to be restarted"
    )
    assert "exited with code -9 after " in supervisor.stderr
    # The new process runs jobs.
    enqueue_many(record_run, [{"log": str(log)} for _ in range(10)])
    wait_until(lambda: len(read_runs(log)) == 10, timeout=30, what="10 jobs to run")
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0, supervisor.stderr


def test_workers_stop_when_the_supervisor_is_killed(workers):
    supervisor = workers("--processes", "2", "--concurrency", "1")
    wait_until(lambda: len(child_pids(supervisor)) == 2, timeout=30, what="two workers")
    children = list(child_pids(supervisor).values())

    supervisor.kill()

    wait_until(
        lambda: not any(is_running(pid) for pid in children),
        timeout=15,
        what="orphaned workers to stop",
    )


def test_a_second_signal_makes_every_process_exit_at_once(workers, log):
    enqueue_many(record_run, [{"log": str(log), "sleep": 30} for _ in range(2)])
    supervisor = workers("--processes", "2", "--concurrency", "1", "--shutdown-timeout", "60")
    wait_until(lambda: len(read_runs(log)) == 2, timeout=30, what="both jobs to start")

    supervisor.send(signal.SIGTERM)
    time.sleep(0.5)
    supervisor.send(signal.SIGTERM)

    # Not 30 s (the jobs) nor 60 s (the timeout): the workers exit at once; leases will expire.
    assert supervisor.wait(timeout=15) == 0, supervisor.stderr
    assert "again: workers exit at once" in supervisor.stderr
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 2


def test_processes_must_be_at_least_one(workers):
    supervisor = workers("--processes", "0")
    assert supervisor.wait(timeout=30) != 0
    assert "--processes: expected a number >= 1, got 0" in supervisor.stderr
    assert not Job.objects.exists()
