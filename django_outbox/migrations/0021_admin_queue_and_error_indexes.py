# The admin: a queue's list without a status filter along (queue, id); and on PostgreSQL, where
# the pg_trgm extension is there or may be created, a trigram index for the search of error
# messages. Both are built while the table is locked for writes (seconds per million jobs).

from django.db import DatabaseError, migrations, models, transaction

TRIGRAM_INDEX = "outbox_job_error_trigrams"


def _trigram_operator_class(cursor):
    """The schema-qualified name of pg_trgm's GIN operator class, or None if it is not there."""
    cursor.execute(
        "SELECT quote_ident(n.nspname) || '.gin_trgm_ops' FROM pg_opclass c "
        "JOIN pg_namespace n ON n.oid = c.opcnamespace "
        "JOIN pg_am a ON a.oid = c.opcmethod "
        "WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin'"
    )
    row = cursor.fetchone()
    return row[0] if row else None


def create_error_trigram_index(apps, schema_editor):
    """Index what the search of error messages compares (``UPPER(last_error) LIKE ...``) by
    its trigrams, for the jobs with an error.

    pg_trgm ships with PostgreSQL's contrib and is a trusted extension (PostgreSQL 13 and
    later: the database's owner may create it). Where it is not installed and cannot be
    created, nothing is built: the search then reads the jobs as before, under its time limit.
    """
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        operator_class = _trigram_operator_class(cursor)
        if operator_class is None:
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
            if cursor.fetchone() is None:
                return
            try:
                # A savepoint: a refused CREATE EXTENSION must not abort the migration.
                with transaction.atomic(using=connection.alias):
                    cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            except DatabaseError:
                return
            operator_class = _trigram_operator_class(cursor)
        if operator_class is None:
            return
        # The condition is the search's own (an empty error holds no text), which the
        # planner needs to see to use a partial index: the jobs that never failed, nearly all,
        # have no entry.
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON django_outbox_job "
            f"USING gin (UPPER(last_error) {operator_class}) WHERE NOT (last_error = '')"
        )


def drop_error_trigram_index(apps, schema_editor):
    # The extension stays: other tables may use it.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0020_mariadb_relay_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["queue", "id"], name="outbox_job_queue"),
        ),
        migrations.RunPython(create_error_trigram_index, drop_error_trigram_index),
    ]
