"""Batched completions: ``atomic=False`` jobs are marked succeeded many per statement, each fenced
by its own lease token, and reported (stats, ``job_succeeded``) only once the row says so."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_outbox import signals
from django_outbox.db import queries_for
from django_outbox.jobs.transitions import mark_many_succeeded
from django_outbox.models import Job, JobStatus
from django_outbox.worker.loop import Worker
from django_outbox.worker.runner import Outcome
from tests.helpers import run_worker
from tests.processes import runs_per_job, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def claim(limit: int, worker_id: str = "w"):
    return queries_for(connection).claim(connection, worker_id, None, limit, 30.0)


@contextmanager
def statements_on(db) -> Iterator[list[str]]:
    """Collect the statements run on ``db``, including those sent to SQLite's raw connection
    (which Django's query log does not see)."""
    seen: list[str] = []
    if db.vendor == "sqlite":
        db.ensure_connection()
        db.connection.set_trace_callback(seen.append)
        try:
            yield seen
        finally:
            db.connection.set_trace_callback(None)
    else:
        with CaptureQueriesContext(db) as captured:
            yield seen
        seen.extend(query["sql"] for query in captured.captured_queries)


def test_mark_many_succeeded_marks_a_batch_in_one_statement():
    tasks.noop_non_atomic.enqueue({"warm": "up"})
    (first,) = claim(limit=1)
    # The completer's connection is set up by its first batch; count a later one.
    assert mark_many_succeeded([first], "default") == {first.id}
    enqueued = tasks.noop_non_atomic.enqueue_many([{"n": n} for n in range(50)])
    jobs = claim(limit=50)
    assert len(jobs) == 50

    with statements_on(connections["default"]) as statements:
        marked = mark_many_succeeded(jobs, "default")

    if connection.vendor == "mysql":
        # No UPDATE ... RETURNING: the rows whose lease holds are read first, locked, in the
        # same short transaction.
        assert [statement.split()[0] for statement in statements] == [
            "START",
            "SELECT",
            "UPDATE",
            "COMMIT",
        ], statements
    else:
        assert len(statements) == 1, statements
    assert marked == {job.pk for job in enqueued}
    rows = Job.objects.filter(pk__in=marked)
    assert set(rows.values_list("status", "lease_token", "lease_expires_at", "attempts")) == {
        (JobStatus.SUCCEEDED, None, None, 1)
    }
    assert not rows.filter(finished_at__isnull=True).exists()
    assert all(
        row.finished_at is not None
        and row.started_at is not None
        and row.finished_at >= row.started_at
        for row in rows
    )


def test_mark_many_succeeded_with_no_jobs_sends_no_statement():
    with statements_on(connections["default"]) as statements:
        assert mark_many_succeeded([], "default") == set()
    assert statements == []


def test_mark_many_succeeded_skips_jobs_whose_lease_no_longer_holds():
    tasks.noop_non_atomic.enqueue_many([{"n": n} for n in range(8)])
    jobs = claim(limit=8)
    taken_over, retrying, failed, already_done, *held = jobs
    # Another worker took it over after its lease expired: a new token.
    Job.objects.filter(pk=taken_over.id).update(lease_token=uuid.uuid4(), worker_id="new-owner")
    # Same token, but the attempt was recorded as failed meanwhile (status no longer running).
    Job.objects.filter(pk=retrying.id).update(status=JobStatus.RETRYING)
    Job.objects.filter(pk=failed.id).update(status=JobStatus.FAILED)
    # Marked once already: a second mark must not count it again.
    assert mark_many_succeeded([already_done], "default") == {already_done.id}
    skipped = [taken_over.id, retrying.id, failed.id, already_done.id]
    before = {row["id"]: row for row in Job.objects.filter(pk__in=skipped).values()}

    marked = mark_many_succeeded(jobs, "default")

    assert marked == {job.id for job in held}
    after = {row["id"]: row for row in Job.objects.filter(pk__in=skipped).values()}
    assert after == before
    assert set(
        Job.objects.filter(pk__in=[job.id for job in held]).values_list("status", flat=True)
    ) == {JobStatus.SUCCEEDED}


def test_a_worker_draining_many_non_atomic_jobs_marks_each_succeeded_once(log, monkeypatch):
    queries = queries_for(connection)
    batches: list[int] = []
    single_marks: list[int] = []
    real_many, real_single = queries.mark_many_succeeded, queries.mark_succeeded

    def counting_many(db, jobs):
        batches.append(len(jobs))
        return real_many(db, jobs)

    def counting_single(db, job):
        single_marks.append(job.id)
        return real_single(db, job)

    monkeypatch.setattr(queries, "mark_many_succeeded", counting_many)
    monkeypatch.setattr(queries, "mark_succeeded", counting_single)
    jobs = tasks.record_run_non_atomic.enqueue_many([{"log": str(log)} for _ in range(500)])

    stats = run_worker(concurrency=8, prefetch=32)

    assert stats.claimed == 500
    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 500})
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})
    assert Job.objects.filter(status=JobStatus.SUCCEEDED, attempts=1).count() == 500
    assert not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists()
    # Recorded by the completer, in batches, never one statement per job.
    assert single_marks == []
    assert sum(batches) == 500
    assert max(batches) > 1, batches


def test_job_succeeded_is_sent_once_per_job_after_its_row_is_marked():
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()

    def receiver(sender, job, **kwargs):
        # Runs where the success is reported; the row must already say succeeded.
        status = Job.objects.filter(pk=job.id).values_list("status", flat=True).get()
        with lock:
            seen.append((job.id, status))

    jobs = tasks.noop_non_atomic.enqueue_many([{"n": n} for n in range(100)])
    signals.job_succeeded.connect(receiver, weak=False)
    try:
        stats = run_worker(concurrency=4, prefetch=16)
    finally:
        signals.job_succeeded.disconnect(receiver)

    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 100})
    assert Counter(job_id for job_id, _ in seen) == Counter({job.pk: 1 for job in jobs})
    assert {status for _, status in seen} == {JobStatus.SUCCEEDED}


def test_a_non_atomic_job_taken_over_before_its_completion_is_written_is_lease_lost():
    succeeded: list[int] = []

    def receiver(sender, job, **kwargs):
        succeeded.append(job.id)

    new_owner = uuid.uuid4()
    job = tasks.taken_over_while_running.enqueue({"new_owner": new_owner})
    other = tasks.noop_non_atomic.enqueue({})
    signals.job_succeeded.connect(receiver, weak=False)
    try:
        stats = run_worker(concurrency=2)
    finally:
        signals.job_succeeded.disconnect(receiver)

    assert stats.outcomes == Counter({Outcome.LEASE_LOST: 1, Outcome.SUCCEEDED: 1})
    assert succeeded == [other.pk]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.lease_token, row.worker_id, row.errors, row.attempts) == (
        JobStatus.RUNNING,
        new_owner,
        "new-owner",
        [],
        1,
    )
    assert row.finished_at is None
    assert row.lease_expires_at is not None


def test_a_worker_stopped_while_a_non_atomic_job_finishes_shuts_down_promptly(handler_gate, caplog):
    """The job finishes after the stop: the completer records it and stops at once.

    A stop that reaches the completer while it gathers a batch must not be lost: the worker
    would wait out the completer's 30 s timeout (logging, falsely, that the jobs it held will
    run again) and leave the completer thread blocked for good, its connection open.
    """
    job = tasks.waits_for_test_non_atomic.enqueue({})
    worker = Worker(concurrency=1)
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        assert tasks.handler_started.wait(10)
        worker.request_stop()
        tasks.handler_may_finish.set()
        wait_until(lambda: not thread.is_alive(), timeout=5, what="the worker to shut down")
    finally:
        tasks.handler_may_finish.set()
        # Only if the test failed: unblock a completer that missed its stop, so that it ends
        # (and closes its connection) rather than block forever.
        missed_stop = getattr(getattr(worker, "_completer", None), "_has_work", None)
        if missed_stop is not None:
            missed_stop.set()
        thread.join(40)
    assert worker.stats.outcomes == Counter({Outcome.SUCCEEDED: 1})
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert "completer did not finish" not in caplog.text
    wait_until(
        lambda: not any(t.name == "outbox-completer" for t in threading.enumerate()),
        timeout=2,
        what="the completer thread to end",
    )
