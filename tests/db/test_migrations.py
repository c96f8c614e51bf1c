"""The migrations match the models, and build the partial indexes the worker's claim relies on."""

import io

import pytest
from django.core.management import call_command
from django.db import connection

from django_outbox.models import Job

pytestmark = pytest.mark.django_db

#: The partial indexes the worker relies on -> (their columns in order, the statuses they hold).
PARTIAL_INDEXES = {
    "outbox_job_claim_queue": (["queue", "priority", "run_at", "id"], ["ready", "retrying"]),
    "outbox_job_claim_any": (["priority", "run_at", "id"], ["ready", "retrying"]),
    "outbox_job_lease": (["lease_expires_at"], ["running"]),
}


def index_definition(name):
    """Return the CREATE INDEX statement the database holds for ``name``, or None."""
    if connection.vendor == "postgresql":
        query = "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname = %s"
    elif connection.vendor == "sqlite":
        query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s AND name = %s"
    else:
        pytest.skip(f"{connection.vendor} has no partial indexes")
    with connection.cursor() as cursor:
        cursor.execute(query, [Job._meta.db_table, name])
        row = cursor.fetchone()
    return row[0] if row else None


def test_the_models_need_no_new_migration():
    out = io.StringIO()
    call_command("makemigrations", "django_outbox", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def table_indexes():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Job._meta.db_table)
    return {name: info for name, info in constraints.items() if info["index"]}


#: MariaDB: the composite indexes that stand for partial ones, led by the generated column of
#: claimable jobs of the index's lane (``plain_lane``, migration 0023) or by the column the
#: partial index's condition tests.
MARIADB_INDEXES = {
    "outbox_job_claim_queue": ["plain_lane", "queue", "priority", "run_at", "id"],
    "outbox_job_claim_any": ["plain_lane", "priority", "run_at", "id"],
    "outbox_job_lease": ["status", "lease_expires_at"],
}
#: MariaDB: a model's index that another serves (the same columns, its id included).
MARIADB_SERVED_BY = {
    "outbox_job_halted": "outbox_job_failed_queue",
    # No partial indexes: the limited claim's candidates are found by status (the pending
    # jobs' index) and filtered, until limited jobs have a claim lane of their own.
    "outbox_job_limited_any": "outbox_job_pending",
    "outbox_job_limited_queue": "outbox_job_pending",
}


def test_every_index_of_the_model_is_in_the_database():
    names = {index.name for index in Job._meta.indexes}
    if connection.vendor == "mysql":
        names = {MARIADB_SERVED_BY.get(name, name) for name in names}
    assert names <= set(table_indexes())


@pytest.mark.parametrize("name", PARTIAL_INDEXES)
def test_each_claim_and_lease_index_exists_with_its_columns_in_order(name):
    expected = MARIADB_INDEXES[name] if connection.vendor == "mysql" else PARTIAL_INDEXES[name][0]
    assert table_indexes()[name]["columns"] == expected


def test_mariadb_claim_lanes_hold_claimable_jobs_alone():
    """Each lane's column holds its number for a claimable job of the lane alone (NULL for
    every other job), so that a claim rewrites the entries of its lane's indexes, no others."""
    if connection.vendor != "mysql":
        pytest.skip("the claim lanes stand for partial indexes on MariaDB")
    columns = ("plain_lane", "fair_lane", "limited_lane", "keyed_lane")
    lanes = {}
    for status in ("ready", "retrying", "running", "succeeded", "failed", "halted", "cancelled"):
        for kind, fair_key, limit_key in (
            ("plain", None, None),
            ("fair", "tenant", None),
            ("limited", None, "api"),
            ("limited and fair", "tenant", "api"),
        ):
            job = Job.objects.create(
                task_name="t",
                queue="q",
                status=status,
                max_attempts=1,
                fair_key=fair_key,
                fair_round=0 if fair_key else None,
                limit_key=limit_key,
                lease_token="00000000-0000-0000-0000-000000000001",
                lease_expires_at="2030-01-01T00:00:00Z",
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {', '.join(columns)} FROM django_outbox_job WHERE id = %s", [job.pk]
                )
                lanes[status, kind] = cursor.fetchone()
    expected = {
        "plain": (1, None, None, None),
        "fair": (None, 2, None, 2),
        "limited": (None, None, 3, 3),
        "limited and fair": (None, None, 3, 3),
    }
    for (status, kind), values in lanes.items():
        claimable = status in ("ready", "retrying")
        assert values == (expected[kind] if claimable else (None,) * 4), (status, kind, values)


@pytest.mark.parametrize("name", PARTIAL_INDEXES)
def test_the_claim_and_lease_indexes_are_partial_on_the_status(name):
    definition = index_definition(name)
    assert definition is not None
    assert "WHERE" in definition.upper()
    condition = definition[definition.upper().index("WHERE") :]
    assert "status" in condition
    for status in PARTIAL_INDEXES[name][1]:
        assert f"'{status}'" in condition
    for status in {"ready", "retrying", "running", "succeeded", "failed"} - set(
        PARTIAL_INDEXES[name][1]
    ):
        assert f"'{status}'" not in condition


def test_the_claim_indexes_order_priority_descending():
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT index_name, collation FROM information_schema.statistics "
                "WHERE table_schema = DATABASE() AND table_name = %s AND column_name = 'priority'",
                [Job._meta.db_table],
            )
            collations = dict(cursor.fetchall())
        assert collations["outbox_job_claim_queue"] == collations["outbox_job_claim_any"] == "D"
        return
    for name in ("outbox_job_claim_queue", "outbox_job_claim_any"):
        definition = index_definition(name)
        assert definition is not None
        assert '"priority" DESC' in definition or "priority DESC" in definition


def test_every_database_lists_a_queue_along_its_own_index():
    """MariaDB too: outbox_job_queue is declared by columns, which it builds."""
    assert table_indexes()["outbox_job_queue"]["columns"] == ["queue", "id"]


def test_every_database_lists_a_task_along_its_own_index():
    """MariaDB too: outbox_job_task is declared by columns, which it builds."""
    assert table_indexes()["outbox_job_task"]["columns"] == ["task_name", "id"]


@pytest.mark.postgresql
def test_postgresql_has_the_error_searchs_trigram_index_of_jobs_with_an_error():
    """Built by migration 0021 where pg_trgm may be created (the test user may)."""
    from django_outbox.db import reports_for

    definition = index_definition("outbox_job_error_trigrams")
    assert definition is not None
    assert "USING gin (upper(last_error)" in definition
    assert "gin_trgm_ops" in definition
    assert "WHERE (NOT (last_error = ''::text))" in definition
    assert reports_for(connection).has_error_trigram_index(connection)


def test_other_databases_have_no_trigram_index():
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL has it")
    from django_outbox.db import reports_for

    assert not reports_for(connection).has_error_trigram_index(connection)
