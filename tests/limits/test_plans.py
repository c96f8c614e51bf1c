"""The limited claim reads along its own partial indexes, whatever else the table holds."""

import pytest
from django.db import connection

from django_outbox.db import queries_for
from django_outbox.db.base import HeldBack
from django_outbox.db.limited import limited_candidates_sql
from django_outbox.models import Job, JobStatus
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def plan_of(sql, params):
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.parametrize("queues", [None, ["default"]])
def test_the_candidates_are_read_along_a_limited_index(queues):
    if connection.vendor == "mysql":
        pytest.skip("MariaDB has no partial indexes: its candidates are read along the lanes")
    finished = tasks.noop.enqueue_many([{}] * 3000)
    Job.objects.filter(pk__in=finished.ids).update(status=JobStatus.SUCCEEDED)
    tasks.noop.enqueue_many([{}] * 2000)
    tasks.capped_per_key.enqueue_many([{}] * 2000, fair_key="big")
    tasks.capped.enqueue_many([{}] * 50)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    queries = queries_for(connection)
    held_back = HeldBack(
        tasks=frozenset({tasks.capped.name}),
        task_keys=frozenset({(tasks.capped_per_key.name, "big")}),
    )
    sql, params = limited_candidates_sql("%s", queries.due_by, queues, ["emails"], held_back, 32)
    plan = plan_of(sql, params)
    assert "outbox_job_limited_" in plan, plan
    assert "Seq Scan on django_outbox_job " not in plan, plan
    if connection.vendor == "sqlite":
        assert all("INDEX" in line for line in plan.splitlines() if "SCAN" in line), plan
