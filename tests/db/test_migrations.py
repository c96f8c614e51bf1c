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
        pytest.skip(f"no index query for {connection.vendor}")
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


def test_every_index_of_the_model_is_in_the_database():
    assert {index.name for index in Job._meta.indexes} <= set(table_indexes())


@pytest.mark.parametrize("name", PARTIAL_INDEXES)
def test_each_claim_and_lease_index_exists_with_its_columns_in_order(name):
    assert table_indexes()[name]["columns"] == PARTIAL_INDEXES[name][0]


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
    for name in ("outbox_job_claim_queue", "outbox_job_claim_any"):
        definition = index_definition(name)
        assert definition is not None
        assert '"priority" DESC' in definition or "priority DESC" in definition
