"""Stopping as operators do: a whole process group signalled, a handler holding the lock."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest
from django.db import connection

from django_outbox import enqueue_many
from django_outbox.models import Job, JobStatus
from tests.processes import child_pids, is_running, read_runs, wait_until
from tests.testapp.models import Note
from tests.testapp.tasks import record_run, writes_then_sleeps

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_sigterm_to_the_whole_process_group_is_one_graceful_stop(workers, log):
    """systemd's default stop and ``kill -TERM -PGID`` signal the supervisor and every worker
    process at once: each worker gets its own SIGTERM besides the one the supervisor forwards."""
    jobs = enqueue_many(record_run, [{"log": str(log), "sleep": 1.0} for _ in range(12)])
    supervisor = workers("--processes", "2", "--concurrency", "2")
    wait_until(lambda: len(read_runs(log)) >= 4, timeout=30, what="every thread to be busy")
    children = list(child_pids(supervisor).values())

    os.killpg(supervisor.pid, signal.SIGTERM)
    # The kernel may merge the forwarded SIGTERM with the group's if both are pending at once;
    # one that comes after the worker handled the first must be the same stop, not an abort.
    time.sleep(0.3)
    for pid in children:
        os.kill(pid, signal.SIGTERM)

    assert supervisor.wait(timeout=30) == 0, supervisor.stderr
    assert "were errors" not in supervisor.stderr
    assert not any(is_running(pid) for pid in children)
    runs = Counter(run.job_id for run in read_runs(log))
    assert set(runs.values()) == {1}
    # Running jobs finished; the others went back unstarted; none is left running.
    for job_id, status, attempts in Job.objects.values_list("pk", "status", "attempts"):
        if job_id in runs:
            assert (status, attempts) == (JobStatus.SUCCEEDED, 1), job_id
        else:
            assert (status, attempts) == (JobStatus.READY, 0), job_id
    assert len(runs) < len(jobs)


def test_sigterm_to_a_single_worker_s_process_group_is_a_graceful_stop(workers, log):
    enqueue_many(record_run, [{"log": str(log), "sleep": 1.0} for _ in range(2)])
    worker = workers("--concurrency", "2")
    wait_until(lambda: len(read_runs(log)) == 2, timeout=30, what="both jobs to start")

    os.killpg(worker.pid, signal.SIGTERM)

    assert worker.wait(timeout=30) == 0, worker.stderr
    assert Job.objects.succeeded().count() == 2


def test_the_shutdown_timeout_holds_while_an_atomic_handler_holds_the_write_lock(workers, log):
    """On SQLite the handler's transaction holds the only write lock until it ends: recording
    the give-up must not wait for it (the busy timeout, 20 s in these tests)."""
    job = writes_then_sleeps.enqueue({"sleep": 60, "log": str(log)})
    worker = workers("--shutdown-timeout", "1")
    wait_until(lambda: read_runs(log), timeout=30, what="the job to start")

    stopped_at = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0, worker.stderr
    took = time.monotonic() - stopped_at

    # 1 s of waiting, plus at most a few short lock waits; far from the 20 s busy timeout.
    assert took < 8, (took, worker.stderr)
    row = Job.objects.get(pk=job.pk)
    # The handler's write died with its process either way.
    assert not Note.objects.filter(job_id=job.pk).exists()
    if connection.vendor == "sqlite":
        # Its own handler held the lock: nothing could be recorded, and the log says so.
        assert row.status == JobStatus.RUNNING
        assert f"job not given up job={job.pk} " in worker.stderr
        assert "job given up" not in worker.stderr
    else:
        assert row.status == JobStatus.RETRYING
        assert "shut down after waiting 1.0s" in row.last_error
        assert f"job given up job={job.pk} " in worker.stderr
