"""The hot path's bookkeeping: how claims commit, prepared claims, and claiming in batches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest
from django.db import connection

from django_outbox.db.postgresql.queries import queries as postgresql
from django_outbox.models import Job, JobStatus
from django_outbox.worker.loop import Worker
from django_outbox.worker.runner import Outcome
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def show(setting: str, on=connection) -> str:
    with on.cursor() as cursor:
        cursor.execute(f"SHOW {setting}")
        return str(cursor.fetchone()[0])


@pytest.mark.postgresql
def test_claims_commit_asynchronously_but_handlers_synchronously(second_connection):
    tasks.noop.enqueue({})
    assert show("synchronous_commit") == "on"

    [job] = postgresql.claim(connection, "w", None, 10, 60)

    assert show("synchronous_commit") == "off"
    # Only on the claiming connection: others, like the enqueuers', keep the server's setting.
    assert show("synchronous_commit", second_connection) == "on"
    assert Job.objects.get(pk=job.id).status == JobStatus.RUNNING


@pytest.mark.postgresql
@pytest.mark.parametrize(("prepare_threshold", "seqscan"), [(None, "on"), (5, "off")])
def test_claiming_connections_turn_sequential_scans_off_only_when_they_prepare(
    prepare_threshold, seqscan
):
    connection.ensure_connection()
    connection.connection.prepare_threshold = prepare_threshold
    try:
        postgresql.claim(connection, "w", None, 1, 60)
        assert show("enable_seqscan") == seqscan
    finally:
        connection.close()


@pytest.mark.postgresql
def test_an_atomic_job_commits_synchronously():
    job = tasks.records_commit_mode.enqueue({})
    run_worker()
    assert Note.objects.get(job_id=job.pk).text == "on"


def test_an_atomic_job_commits_with_its_writes_then_runs_its_on_commit_callbacks():
    # On PostgreSQL the success mark and the COMMIT travel as one query, inside the atomic
    # block: the block's own commit then finds nothing to do, and must still run callbacks.
    first = tasks.notes_its_status_on_commit.enqueue({})
    second = tasks.notes_its_status_on_commit.enqueue({})
    stats = run_worker(concurrency=1)
    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 2})
    for job in (first, second):
        assert sorted(Note.objects.filter(job_id=job.pk).values_list("text", flat=True)) == [
            "after commit: succeeded, in_transaction=False",
            "written",
        ]
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgresql
def test_the_claim_is_prepared_only_when_the_project_allows_prepared_statements():
    tasks.noop.enqueue_many([{}, {}])
    connection.ensure_connection()
    # Django's default (one leg of the suite runs with prepared statements).
    connection.connection.prepare_threshold = None
    postgresql.claim(connection, "w", None, 1, 60)
    assert not [sql for sql in prepared_statements() if "SKIP LOCKED" in sql]

    connection.connection.prepare_threshold = 5
    try:
        [job] = postgresql.claim(connection, "w", None, 1, 60)
        assert [sql for sql in prepared_statements() if "SKIP LOCKED" in sql]
        assert postgresql.mark_succeeded(connection, job)
    finally:
        connection.close()
    assert Job.objects.succeeded().count() == 1


@contextmanager
def prepared_on_an_emptied_table() -> Iterator[None]:
    """Every statement of this session prepared at once, with the job table's statistics
    saying it is empty (as after a burst drained and autovacuum ran); the session is closed
    after, taking its prepared statements with it."""
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    connection.ensure_connection()
    connection.connection.prepare_threshold = 0
    try:
        yield
    finally:
        connection.close()


@pytest.mark.postgresql
def test_no_hot_statement_is_planned_as_a_scan_of_the_whole_table():
    # A worker polling an empty queue runs its claim many times on an empty table: a generic
    # plan adopted then (after five runs) would scan the whole table, twice, on every claim
    # once a burst arrives (seen: 0.7 s per claim at 20,000 jobs).
    with prepared_on_an_emptied_table():
        for _ in range(8):
            assert postgresql.claim(connection, "w", ["default"], 100, 60) == []
        tasks.noop.enqueue_many([{} for _ in range(2000)])
        claimed = postgresql.claim(connection, "w", ["default"], 10, 60)
        assert len(claimed) == 10
        [(name, generic_plans)] = prepared("SKIP LOCKED")
        assert generic_plans > 0  # The plan made for the empty table is the one in use.
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN EXECUTE {name}(ARRAY['default'], 10, 60, 'w')")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Seq Scan" not in plan, plan
        assert "Index Cond: (id = ANY" in plan, plan

        assert postgresql.mark_many_succeeded(connection, claimed[:5]) == {
            job.id for job in claimed[:5]
        }
        for job in claimed[5:]:
            assert postgresql.mark_succeeded(connection, job)
        # Planned each time with the ids at hand: never prepared.
        assert prepared("RETURNING id") == []
        assert prepared("id = $1 AND lease_token = $2") == []
    assert Job.objects.succeeded().count() == 10


@pytest.mark.postgresql
def test_a_fair_jobs_round_is_planned_for_the_table_as_it_is_never_kept():
    # Kept (prepared), the round's lookups were planned on the emptied table as scans of it: a
    # transaction enqueueing 20,000 fair jobs one by one then took minutes, not seconds.
    with prepared_on_an_emptied_table():
        for number in range(8):
            tasks.noop.enqueue({"n": number}, fair_key=f"tenant-{number % 3}")
            tasks.noop.enqueue_many([{"n": number}], fair_key=f"tenant-{number % 3}")
        tasks.noop.enqueue({"n": "unkeyed"})
        assert prepared("MAX(fair_round)") == []
        # Statements are prepared on this connection: an unkeyed job's INSERT is.
        assert prepared("INSERT INTO") != []
    rounds = Job.objects.filter(fair_key="tenant-0").order_by("id")  # 3 of each enqueue
    assert list(rounds.values_list("fair_round", flat=True)) == list(range(6))


def prepared(fragment: str) -> list[tuple[str, int]]:
    """(name, generic plans so far) of this session's prepared statements with ``fragment``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, generic_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        rows: list[tuple[str, int]] = cursor.fetchall()
        return rows


def hold(worker: Worker, held: int, completing: int) -> None:
    """Make ``worker`` hold ``held`` jobs, ``completing`` of them waiting for the completer."""
    # Stand-ins: only their number counts here.
    worker.held._jobs = {job_id: cast(Any, object()) for job_id in range(held)}
    worker.held._completing = set(range(completing))


def test_claims_stop_while_the_completer_is_behind():
    worker = Worker(concurrency=2, prefetch=0)
    hold(worker, held=3, completing=2)
    assert worker._free_slots() == 1  # one thread busy, one free
    # Every thread free, but twice the capacity already waits for the completer.
    hold(worker, held=4, completing=4)
    assert worker._free_slots() == 0


def test_an_enqueue_wakes_a_busy_worker_only_for_a_batch_worth_of_places():
    worker = Worker(concurrency=2, prefetch=10)  # claims in batches of 5 when busy
    worker._wake_on_completion = True
    hold(worker, held=10, completing=0)  # 2 places free: completions will claim later
    worker._job_enqueued("default")
    assert not worker._wake.is_set()

    hold(worker, held=7, completing=0)  # 5 places free
    worker._job_enqueued("default")
    assert worker._wake.is_set()

    # The last claim drained the queue, so no completion will claim: every enqueue wakes it.
    worker._wake.clear()
    worker._wake_on_completion = False
    hold(worker, held=11, completing=0)
    worker._job_enqueued("default")
    assert worker._wake.is_set()


def test_an_enqueue_to_a_queue_the_worker_does_not_run_never_wakes_it():
    worker = Worker(queues=["emails"])
    worker._job_enqueued("reports")
    assert not worker._wake.is_set()
    worker._job_enqueued("emails")
    assert worker._wake.is_set()
