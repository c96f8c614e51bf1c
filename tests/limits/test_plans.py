"""The limited claim reads along its own partial indexes, whatever else the table holds."""

import pytest
from django.db import connection, transaction
from django.test import override_settings

from django_outbox.db import queries_for
from django_outbox.db.base import HeldBack, WholeLimit
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


@pytest.mark.postgresql
def test_the_one_trip_claim_counts_running_jobs_by_an_index_scan():
    """Finished jobs' entries stay in outbox_job_lease until a VACUUM. An index scan marks them
    dead the first time it meets them; a bitmap scan reads each one's row again at every
    claim, and a sequential scan the whole table."""
    from django_outbox.db.postgresql import limited as one_trip
    from django_outbox.db.postgresql.queries import CLAIM_PICKED_SQL

    queries = queries_for(connection)
    tasks.capped.enqueue_many([{}] * 50)
    old = tasks.noop.enqueue_many([{}] * 6000)
    Job.objects.filter(pk__in=old.ids).update(status=JobStatus.SUCCEEDED)
    # Statistics taken while a few hundred jobs ran, their leases in no order of the table's
    # (extended by heartbeats, claimed by many workers).
    running = tasks.noop.enqueue_many([{}] * 300)
    assert len(queries.claim(connection, "w", [tasks.noop.queue], 300, 60.0)) == 300
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET lease_expires_at = now() + random() * interval '1h'"
            " WHERE status = 'running'"
        )
        cursor.execute("ANALYZE")
    # Since then, these jobs ran and finished, as in a drain between two VACUUMs.
    finished = tasks.noop.enqueue_many([{}] * 3000)
    assert len(queries.claim(connection, "w", [tasks.noop.queue], 3000, 60.0)) == 3000
    Job.objects.filter(pk__in=[*finished.ids, *running.ids]).update(status=JobStatus.SUCCEEDED)
    candidates, candidate_params = limited_candidates_sql(
        "%s", queries.due_by, None, [], HeldBack(), 32, conditions_added=one_trip.WITH_ROOM
    )
    limits = [WholeLimit("task", tasks.capped.name, 2, None, None)]
    *settings, (claim, params) = one_trip.claim_in_one_trip_sql(
        CLAIM_PICKED_SQL, candidates, candidate_params, limits, 32, 60.0, "w"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        for sql, each in settings:
            cursor.execute(sql, each)
        cursor.execute("EXPLAIN " + claim, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using outbox_job_lease" in plan, plan
    assert "Bitmap Index Scan on outbox_job_lease" not in plan, plan


@pytest.mark.postgresql
@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 1000, "RATE_LIMIT": "100000/s"}}})
def test_a_prepared_one_trip_claim_is_planned_once_along_the_indexes():
    """Prepared (``prepare_threshold``), the one-trip claim runs a generic plan from its first
    run: planned anew at every claim, it spent as long planning as running, holding the limits'
    rows the while. That plan reads the jobs along the limited and lease indexes."""
    if connection.connection is None:
        connection.ensure_connection()
    if getattr(connection.connection, "prepare_threshold", None) is None:
        pytest.skip("statements are prepared only with OPTIONS['prepare_threshold']")
    from django_outbox.limits.claims import claim_limited

    tasks.noop.using(queue="crm").enqueue_many([{}] * 40)
    tasks.noop.enqueue_many([{}] * 3000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    for _ in range(3):
        assert len(claim_limited("default", "w", ["crm"], 10, 30).jobs) == 10
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%clock_timestamp()%%'"
        )
        (name, generic, custom), *others = cursor.fetchall()
        assert not others
        assert (generic, custom) == (3, 0)
        # The plan those runs used (prepared statements are the connection's own).
        cursor.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', false)")
        parameters = cursor.execute(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = %s", [name]
        ).fetchone()[0]
        cursor.execute(f"EXPLAIN EXECUTE {name}({', '.join(['NULL'] * len(parameters))})")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET plan_cache_mode")
    assert "outbox_job_limited_" in plan, plan
    assert "Index Scan using outbox_job_lease" in plan, plan
    assert "Seq Scan on django_outbox_job " not in plan, plan
