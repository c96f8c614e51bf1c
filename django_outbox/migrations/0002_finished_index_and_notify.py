"""Index finished jobs for retention pruning; on PostgreSQL, NOTIFY workers of every enqueue."""

from django.db import migrations, models

# One notification per queue per statement, sent inside the enqueueing transaction: PostgreSQL
# delivers it only if that commits, and folds identical ones of a transaction into one. Jobs
# due later are not announced; the worker's poll finds them. statement_timestamp(), not now():
# a job's default run_at is its INSERT's statement time, later than its transaction's start.
CREATE_TRIGGER = """
CREATE OR REPLACE FUNCTION django_outbox_job_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('django_outbox', queue)
    FROM (SELECT DISTINCT queue FROM new_jobs WHERE run_at <= statement_timestamp()) AS due;
    RETURN NULL;
END
$$;
CREATE TRIGGER django_outbox_job_notify AFTER INSERT ON django_outbox_job
REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION django_outbox_job_notify();
"""

DROP_TRIGGER = """
DROP TRIGGER IF EXISTS django_outbox_job_notify ON django_outbox_job;
DROP FUNCTION IF EXISTS django_outbox_job_notify();
"""


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0001_initial"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("status"),
                models.F("finished_at"),
                condition=models.Q(("status__in", ("succeeded", "failed"))),
                name="outbox_job_finished",
            ),
        ),
        migrations.RunPython(_on_postgresql(CREATE_TRIGGER), _on_postgresql(DROP_TRIGGER)),
    ]
