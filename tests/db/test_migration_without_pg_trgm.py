"""Migrations and the admin's search of errors where pg_trgm may not be created.

Migration 0021 builds the error search's trigram index only where the pg_trgm extension is
there or may be created. The suite's own database is migrated by a superuser, who may; here a
database of the test's own is migrated by a role that may not (pg_trgm is a trusted extension:
creating it takes the CREATE privilege on the database, which this role lacks), as on a managed
server where the application's user owns its schema but not its database.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from django_outbox.db import reports_for
from django_outbox.models import Job
from tests.helpers import default_connection_on
from tests.testapp import tasks

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

CHANGELIST = "admin:django_outbox_job_changelist"


def server_url(database: str) -> str:
    settings = connection.settings_dict
    return (
        f"postgresql://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{database}"
    )


def run(database: str, *statements: str) -> None:
    """Run ``statements`` as the suite's user on ``database``, each in its own transaction."""
    with psycopg.connect(server_url(database), autocommit=True) as admin:
        for statement in statements:
            admin.execute(statement)


@pytest.fixture
def database_without_pg_trgm() -> Iterator[str]:
    """The test's default connection on a new database, as a role that may create tables in
    its schema but not extensions, migrated; put back afterwards. Yield the role's name."""
    settings = connection.settings_dict
    # Named after the suite's test database, so that suites on one server never share them.
    name = f"{settings['NAME']}_no_trgm"
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            pytest.skip("needs a superuser, to create a role and a database")
    # template0: the database starts without any extension a server's template1 may hold.
    run(
        "postgres",
        f"DROP DATABASE IF EXISTS {name} WITH (FORCE)",
        f"DROP ROLE IF EXISTS {name}",
        f"CREATE ROLE {name} LOGIN",
        f"CREATE DATABASE {name} TEMPLATE template0",
    )
    run(name, f"ALTER SCHEMA public OWNER TO {name}")
    try:
        with default_connection_on(NAME=name, USER=name):
            yield name
    finally:
        run("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"DROP ROLE {name}")


def test_the_migrations_apply_without_the_trigram_index(database_without_pg_trgm):
    with connection.cursor() as cursor:
        # What the migration meets: pg_trgm on the server, but not allowed to this role.
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        if cursor.fetchone() is None:
            pytest.skip("pg_trgm is not on this server: the branch tested is its refusal")
        cursor.execute("SELECT has_database_privilege(current_database(), 'CREATE')")
        assert cursor.fetchone()[0] is False
        cursor.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'")
        assert cursor.fetchone()[0] == 0
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s", [Job._meta.db_table]
        )
        indexes = {row[0] for row in cursor.fetchall()}
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    assert "outbox_job_error_trigrams" not in indexes
    assert {index.name for index in Job._meta.indexes} <= indexes
    assert not reports_for(connection).has_error_trigram_index(connection)


def test_they_unapply_and_apply_again(database_without_pg_trgm):
    """The trigram index's reverse drops an index that was never built."""
    call_command("migrate", "django_outbox", "0020", verbosity=0, database="default")
    call_command("migrate", "django_outbox", verbosity=0, database="default")
    assert not reports_for(connection).has_error_trigram_index(connection)


def test_the_error_search_reads_the_jobs_without_the_index(database_without_pg_trgm):
    """Every match found, in the list's order; a text none holds, an empty list."""
    jobs = []
    for error in ("KeyError: 'customer'", "TimeoutError: timed out", "KeyError: 'order'"):
        job = tasks.noop.enqueue()
        Job.objects.filter(pk=job.pk).update(status="failed", last_error=error)
        jobs.append(job)
    tasks.noop.enqueue()
    client = Client()
    client.force_login(User.objects.create_superuser("operator", password="operator"))

    response = client.get(reverse(CHANGELIST), {"q": "error:keyerror"})
    assert response.status_code == 200
    cl = response.context["cl"]
    assert [job.pk for job in cl.result_list] == [jobs[2].pk, jobs[0].pk]
    assert str(cl.result_count) == "2"

    response = client.get(reverse(CHANGELIST), {"q": "error:no such error"})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []
    assert str(response.context["cl"].result_count) == "0"
