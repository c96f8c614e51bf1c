"""MariaDB and MySQL: limited jobs (a limit key) get a claim lane of their own, 3, and the
limited claim's indexes, as the partial indexes ``outbox_job_limited_*`` are elsewhere.

Lanes 1 and 2 (plain and fair jobs, migration 0017) then hold no limited job: the other claims
never read past a capped key's backlog. Nothing on PostgreSQL and SQLite.
"""

from django.db import migrations

from ._mysql import run_on_mysql

CREATE = [
    """
    ALTER TABLE django_outbox_job MODIFY COLUMN claim_lane TINYINT AS (
        CASE WHEN status IN ('ready', 'retrying') THEN
            CASE WHEN limit_key IS NOT NULL THEN 3 WHEN fair_key IS NULL THEN 1 ELSE 2 END
        END
    ) VIRTUAL
    """,
    "CREATE INDEX outbox_job_limited_any ON django_outbox_job "
    "(claim_lane, priority DESC, fair_round, run_at, id)",
    "CREATE INDEX outbox_job_limited_queue ON django_outbox_job "
    "(claim_lane, queue, priority DESC, fair_round, run_at, id)",
]

DROP = [
    "DROP INDEX outbox_job_limited_any ON django_outbox_job",
    "DROP INDEX outbox_job_limited_queue ON django_outbox_job",
    """
    ALTER TABLE django_outbox_job MODIFY COLUMN claim_lane TINYINT AS (
        CASE WHEN status IN ('ready', 'retrying') THEN IF(fair_key IS NULL, 1, 2) END
    ) VIRTUAL
    """,
]


class Migration(migrations.Migration):
    # DDL: MariaDB commits at each statement, and Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [
        ("django_outbox", "0018_limits"),
    ]

    operations = [
        run_on_mysql(CREATE, DROP),
    ]
