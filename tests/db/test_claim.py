"""The claim: which jobs, in what order, and never the same job to two claimers."""

import threading

import pytest
from django.db import connection, connections

from django_outbox.db import queries_for
from django_outbox.db.base import ClaimKind
from django_outbox.db.postgresql.queries import claim_sql
from django_outbox.models import Job, JobStatus
from django_outbox.tasks.enqueue import build_job
from tests.bulk_rows import insert_jobs
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def claim(limit=10, queues=None, worker_id="w"):
    db = connections["default"]
    return queries_for(db).claim(db, worker_id, queues, limit, 30.0)


def test_claims_take_runnable_jobs_by_priority_up_to_the_limit():
    low = tasks.noop.enqueue({}, priority=-1)
    high = tasks.noop.enqueue({}, priority=5)
    normal = tasks.noop.enqueue({})
    tasks.noop.enqueue({}, delay=600)
    first = claim(limit=2)
    assert [job.id for job in first] == [high.pk, normal.pk]
    assert [job.id for job in claim(limit=10)] == [low.pk]
    assert claim() == []


def test_claims_respect_queues():
    email = tasks.write_note.enqueue({"text": "x"})
    tasks.noop.enqueue({})
    assert [job.id for job in claim(queues=["emails"])] == [email.pk]
    assert claim(queues=["emails", "reports"]) == []


def test_claimed_jobs_carry_what_the_handler_needs():
    job = tasks.write_note.enqueue({"text": "x"}, priority=3)
    (claimed,) = claim()
    assert claimed.id == job.pk
    assert claimed.task_name == "tests.testapp.tasks.write_note"
    assert claimed.queue == "emails"
    # Decoded by the attempt, not the claim: a poison payload fails its own job only.
    assert claimed.payload is None
    assert claimed.decode_payload() == {"text": "x"}
    assert claimed.payload == {"text": "x"}
    assert (claimed.attempts, claimed.max_attempts, claimed.priority) == (1, 10, 3)


def test_concurrent_claimers_never_get_the_same_job():
    Job.objects.bulk_create([build_job(tasks.noop, {"n": n}) for n in range(300)])
    claimed: list[list[int]] = [[] for _ in range(4)]

    def claimer(index):
        try:
            while batch := claim(limit=7, worker_id=f"w{index}"):
                claimed[index].extend(job.id for job in batch)
        finally:
            connections["default"].close()

    threads = [threading.Thread(target=claimer, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [job_id for ids in claimed for job_id in ids]
    assert len(every) == 300
    assert len(set(every)) == 300
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 300


@pytest.mark.postgresql
def test_the_postgresql_claim_uses_the_partial_index():
    insert_jobs(20_000, task_name=tasks.noop.name, status=JobStatus.SUCCEEDED)
    Job.objects.bulk_create([build_job(tasks.write_note, {"text": "x"}) for _ in range(50)])
    # Fair jobs, in a queue of their own.
    tasks.noop.enqueue_many([{}] * 5000, queue="bulk", fair_key="big")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_job")
        for queue_filter, kind, index in [
            ("AND queue = ANY(%(queues)s)", ClaimKind.FULL, "outbox_job_claim_queue"),
            ("AND queue = ANY(%(queues)s)", ClaimKind.PLAIN, "outbox_job_claim_queue"),
            # Either of the fair indexes, as every fair job is of the claim's queue.
            ("AND queue = ANY(%(queues)s)", ClaimKind.FAIR, "outbox_job_fair_"),
            ("", ClaimKind.FULL, "outbox_job_claim_any"),
            ("", ClaimKind.PLAIN, "outbox_job_claim_any"),
            ("", ClaimKind.FAIR, "outbox_job_fair_any"),
        ]:
            # Each claim of the queue with a backlog of its kind.
            queues = ["bulk"] if kind is ClaimKind.FAIR else ["emails"]
            cursor.execute(
                "EXPLAIN " + claim_sql(queue_filter, kind),
                {"limit": 10, "lease_seconds": 30, "worker_id": "w", "queues": queues},
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
            # An index scan, or a bitmap one where the planner expects a handful of rows.
            assert f" using {index}" in plan or f" on {index}" in plan, plan
            assert "Seq Scan on django_outbox_job candidate" not in plan, plan


def test_the_sqlite_claim_uses_a_partial_index():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's query plan")
    from django_outbox.db.rows import CLAIMS
    from django_outbox.db.sqlite.queries import CLAIM_SQL as SQLITE_CLAIM

    connection.ensure_connection()
    raw = connection.connection.cursor()
    # The index of the worker's queues, or (where the table's statistics say there is one queue,
    # after an ANALYZE) the one of all queues: both hold only claimable jobs.
    for queue_filter, kind, indexes in [
        ("AND queue IN (?)", ClaimKind.FULL, ("outbox_job_claim_queue", "outbox_job_claim_any")),
        ("AND queue IN (?)", ClaimKind.FAIR, ("outbox_job_fair_queue", "outbox_job_fair_any")),
        ("", ClaimKind.FULL, ("outbox_job_claim_any",)),
        ("", ClaimKind.FAIR, ("outbox_job_fair_any",)),
    ]:
        params = ["+30 seconds", "w", "emails", 10] if queue_filter else ["+30 seconds", "w", 10]
        pick, order = CLAIMS[kind]
        sql = SQLITE_CLAIM.format(queue_filter=queue_filter, pick=pick, order=order)
        plan = raw.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        candidate = [str(row) for row in plan if "candidate" in str(row)]
        assert candidate, plan
        assert all(any(index in row for index in indexes) for row in candidate), plan
