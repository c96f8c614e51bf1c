"""MariaDB: every statement on a job's path reads an index, never the whole table, at 20,000+
finished jobs (as the PostgreSQL plan tests check there)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_outbox.db.base import ClaimKind
from django_outbox.db.rows import CLAIMS
from django_outbox.jobs.transitions import rescue_expired_leases
from django_outbox.models import Job, JobDependency, JobStatus
from tests.bulk_rows import insert_jobs
from tests.db.plans import mariadb_plan
from tests.testapp import tasks

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's query plans"),
]

TABLE = Job._meta.db_table


@pytest.fixture
def backlog() -> None:
    """20,000 finished jobs, a backlog of 5,000 in "emails", 5,000 fair ones in "bulk", a few
    running, a few keyed and 1,000 that depend on others, with the table's statistics up to
    date."""
    insert_jobs(20_000, task_name=tasks.noop.name, status=JobStatus.SUCCEEDED)
    insert_jobs(5_000, task_name=tasks.write_note.name, status=JobStatus.READY, queue="emails")
    tasks.noop.enqueue_many([{}] * 5000, queue="bulk", fair_key="big")
    for number in range(5):
        tasks.noop.enqueue({}, lock=f"key-{number % 2}")
    parents = Job.objects.filter(status=JobStatus.SUCCEEDED).values_list("pk", flat=True)[:1000]
    # Due, first in the line of "emails": each claim of it checks their dependencies.
    dependents = tasks.noop.enqueue_many([{}] * 1000, queue="emails", priority=5)
    JobDependency.objects.bulk_create(
        JobDependency(job_id=job.pk, depends_on_id=parent)
        for job, parent in zip(dependents, parents, strict=True)
    )
    Job.objects.filter(pk__in=[job.pk for job in dependents]).update(has_dependencies=True)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET status = 'running', lease_token = UUID(), "
            "lease_expires_at = UTC_TIMESTAMP(6) WHERE queue = 'emails' LIMIT 5"
        )
        cursor.execute(f"ANALYZE TABLE {TABLE}, {JobDependency._meta.db_table}")


def plan(sql: str, params: object = (), *, run: bool = False) -> str:
    with connection.cursor() as cursor:
        return mariadb_plan(cursor, sql, params, run=run)


def assert_reads_index(text: str, index: str) -> None:
    rows = [line for line in text.splitlines() if line.split()[0] in ("candidate", TABLE)]
    assert rows, text
    assert "SCAN" not in text, text
    assert re.search(rf"\b{index}\b", rows[0]), text


def rows_read(line: str) -> float:
    """The rows a plan's line reads (None, a table not read, or optimized away: 0)."""
    rows = line.rpartition("rows=")[2]
    return 0.0 if rows == "None" else float(rows)


@pytest.mark.usefixtures("backlog")
@pytest.mark.parametrize(
    ("kind", "queues", "index"),
    [
        (ClaimKind.FULL, ["emails"], "outbox_job_claim_queue"),
        (ClaimKind.FULL, [], "outbox_job_claim_any"),
        # Either fair index: every fair job is of the claim's queue.
        (ClaimKind.FAIR, ["bulk"], "outbox_job_fair_(queue|any)"),
        (ClaimKind.FAIR, [], "outbox_job_fair_any"),
    ],
)
def test_each_claim_reads_its_lane_of_the_claim_indexes_in_order(kind, queues, index):
    from django_outbox.db.mysql.queries import (
        FAIR_LANE,
        PICK_SQL,
        PLAIN_LANE,
        claim_index_hint,
        in_lane,
        with_lookup_hints,
    )

    pick, order = CLAIMS[kind]
    pick = with_lookup_hints(pick)
    queue_filter = f"AND queue IN ({', '.join(['%s'] * len(queues))})" if queues else ""
    sql = PICK_SQL.format(
        in_lane=in_lane(FAIR_LANE if kind is ClaimKind.FAIR else PLAIN_LANE),
        queue_filter=queue_filter,
        pick=pick,
        order=order,
        index_hint=claim_index_hint(kind, len(queues)),
    )
    text = plan(sql, [*queues, 10])
    assert_reads_index(text, index)
    # Run: the claim of 10 reads about 10 rows of the index (a backlog of 5,000 each), and a
    # row's checks a row or two each.
    ran = plan(sql, [*queues, 10], run=True)
    assert rows_read(ran.splitlines()[0]) <= 20, ran
    # The line and dependency checks look rows up by key, never scan.
    assert all(rows_read(line) <= 2 for line in ran.splitlines()[1:]), ran
    first = text.splitlines()[0]
    if connection.mysql_version >= (10, 8):  # type: ignore[attr-defined]
        # Read in the claim's order, as many rows as it takes: no sort of every due job.
        assert "filesort" not in first, text


@pytest.mark.usefixtures("backlog")
def test_the_worker_and_enqueue_statements_read_indexes():
    from django_outbox.db.mysql import queries as mysql

    (job_id,) = Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", flat=True)[:1]
    ids = ", ".join(
        str(pk) for pk in Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", flat=True)
    )
    for sql, params, most, run in [
        # Whether fair jobs are due: the first of the fair lane's due jobs.
        (mysql.FAIR_WAITING_SQL.format(queue_filter=""), (), 1, True),
        (mysql.HELD_LEASES_SQL.format(ids=ids), (), 5, True),
        (f"SELECT slot FROM {mysql.ENQUEUE_LOCK_TABLE} WHERE slot = %s FOR UPDATE", (7,), 1, True),
        # By primary key (or by the status and id: the same row).
        (mysql.MARK_SUCCEEDED_SQL, (job_id, "x"), 1, False),
        (mysql.MARK_MANY_SUCCEEDED_SQL.format(ids=ids), (), 5, False),
    ]:
        text = plan(sql, params, run=run)
        assert "SCAN" not in text, (sql, text)
        assert all(rows_read(line) <= most for line in text.splitlines()), (sql, text)


@pytest.mark.usefixtures("backlog")
def test_a_fair_enqueues_look_for_rounds_reads_the_fair_indexes():
    from django_outbox.db.mysql.queries import ROUNDS_SQL

    text = plan(ROUNDS_SQL, ("bulk", "bulk", "bulk", "bulk", "big"), run=True)
    # The maxima are read off an index's end ("Select tables optimized away"), the next due
    # round is the first due entry of the fair lane of the queue.
    assert "SCAN" not in text, text
    assert "outbox_job_fair_round" in text, text
    assert all(rows_read(line) <= 5 for line in text.splitlines()), text


@pytest.mark.usefixtures("backlog")
def test_the_rescue_of_expired_leases_reads_the_lease_index():
    with CaptureQueriesContext(connection) as captured:
        rescue_expired_leases("default", 10)
    selects = [
        query["sql"]
        for query in captured.captured_queries
        if query["sql"].startswith("SELECT") and "lease_expires_at" in query["sql"]
    ]
    assert selects
    for select in selects:
        text = plan(select)
        # Along the running jobs' entries (of the lease index, or of status and id).
        assert "SCAN" not in text, text
        assert re.search(r"outbox_job_(lease|pending)\b", text), text
        # The optimizer's estimate, not rows read: a handful of the 30,000, never the table
        # (the read of abandoned leases' tokens made it 10 where it was 5).
        assert all(rows_read(line) <= 50 for line in text.splitlines()), text


@pytest.mark.usefixtures("backlog")
def test_a_claim_of_a_key_behind_another_checks_the_line_by_the_key():
    from django_outbox.db.mysql.queries import PICK_SQL, PLAIN_LANE, in_lane

    pick, order = CLAIMS[ClaimKind.FULL]
    sql = PICK_SQL.format(
        in_lane=in_lane(PLAIN_LANE), queue_filter="", pick=pick, order=order, index_hint=""
    )
    text = plan(sql, [10])
    assert "outbox_job_lock_line" in text, text
