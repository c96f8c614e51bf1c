"""Queries on finished jobs use outbox_job_finished on SQLite too (see partial_indexes)."""

import datetime
import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.db.partial_indexes import index_condition
from django_outbox.jobs.transitions import prune_finished
from django_outbox.models import Job, JobStatus
from tests.db.plans import mariadb_plan
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def plan_of(sql: str) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The table is small: forbid the scan to see whether the index can serve.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}")
            return "\n".join(row[0] for row in cursor.fetchall())
        if connection.vendor == "mysql":
            return mariadb_plan(cursor, sql)
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def test_the_pruners_reads_go_along_the_finished_indexes():
    """Without the spelled-out conditions, SQLite scanned and sorted the table for every batch,
    and the read of jobs others depend on walked every expired job on both databases."""
    job = tasks.noop.enqueue()
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.SUCCEEDED, finished_at=timezone.now() - datetime.timedelta(days=9)
    )
    with CaptureQueriesContext(connection) as queries:
        assert prune_finished("default", {"SUCCEEDED": 86400}) == 1
    # Each batch's read of the oldest expired jobs: those no job depends on, then the others.
    selects = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and "ORDER BY" in q["sql"] and "finished_at" in q["sql"]
    ]
    assert len(selects) == 2
    for select, index in zip(
        selects, ["outbox_job_finished", "outbox_job_finished_parents"], strict=True
    ):
        plan = plan_of(select)
        if connection.vendor == "mysql":
            # Either composite index serves either read (has_dependents leads the second).
            index = "outbox_job_finished(_parents)?"
        if connection.vendor == "sqlite" and index == "outbox_job_finished_parents":
            # Since outbox_job_finished also holds the id (the admin's keyset pages), SQLite's
            # planner, without statistics, reads the parents along it too: a search, not a
            # scan, but one that passes over the expired jobs nobody depends on. Known; the
            # first read deletes those first.
            index = "outbox_job_finished(_parents)?"
        assert re.search(rf"\b{index}\b", plan), plan
        assert "SCAN django_outbox_job" not in plan
        assert "Seq Scan" not in plan


@pytest.mark.parametrize(
    ("statuses", "fair", "sql"),
    [
        (["halted"], None, "status = 'halted'"),
        (["ready", "retrying"], False, "status IN ('ready', 'retrying') AND fair_key IS NULL"),
        (["ready", "retrying"], True, "status IN ('ready', 'retrying') AND fair_key IS NOT NULL"),
    ],
)
def test_index_condition_spells_out_the_indexes_conditions(statuses, fair, sql):
    assert index_condition(statuses, fair=fair) == sql
