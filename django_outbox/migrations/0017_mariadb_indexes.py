"""MariaDB and MySQL: the job table's indexes, which earlier migrations could not create there.

The model's indexes are partial and on expressions: MariaDB has neither, and Django leaves them
out there. In their place, on MariaDB and MySQL only:

- a generated column, ``claim_lane``: 1 for a claimable job that is not fair, 2 for a
  claimable fair job, NULL for every other job. The claims' indexes start with it, so that a
  claim reads claimable jobs alone, in its order, however many finished jobs the table keeps
  (what the partial indexes' conditions do elsewhere).
- the columns that hold keys (unique, lock and fair keys) compared as written
  (``utf8mb4_bin``), not by the database's default collation, which ignores case.
- no JSON_VALID() checks on the payload, resume data, context and return value: MariaDB's
  refuses JSON nested deeper than 32 levels, which payloads may be.
- composite indexes for every other partial index, led by the column its condition tests.
- ``django_outbox_enqueue_lock``: rows that enqueuers which check before they insert (a unique
  key, a bounded queue, a fair key's round) lock to wait for each other, as PostgreSQL's
  advisory locks do.

Nothing on PostgreSQL and SQLite.
"""

from django.db import migrations

from ._mysql import run_on_mysql

#: How many rows the enqueuers' lock table holds (keys are hashed into them).
ENQUEUE_LOCK_SLOTS = 4096

# Descending priority: MariaDB 10.8+ and MySQL 8 keep it in the index, so that a claim reads
# the index in its ORDER BY. (Earlier MariaDB versions read DESC and build an ascending index.)
CREATE = [
    # Keys compare as written, as on PostgreSQL and SQLite: the database's default collation
    # would make "Order-1" and "order-1" one lock key, fair key or unique key. (Task and queue
    # names keep it: the admin's search ignores case by it.)
    """
    ALTER TABLE django_outbox_job
        MODIFY unique_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        MODIFY lock_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        MODIFY fair_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    """,
    # Without JSON_VALID() checks on what handlers and enqueuers pass: MariaDB's refuses JSON
    # nested deeper than 32 levels, and payloads may nest 100 (serialization.MAX_DEPTH). The
    # queue writes these columns from its own encoder, which checks them.
    """
    ALTER TABLE django_outbox_job
        MODIFY payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        MODIFY resume_data LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        MODIFY context LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        MODIFY return_value LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    """,
    """
    ALTER TABLE django_outbox_job ADD COLUMN claim_lane TINYINT AS (
        CASE WHEN status IN ('ready', 'retrying') THEN IF(fair_key IS NULL, 1, 2) END
    ) VIRTUAL
    """,
    "CREATE INDEX outbox_job_claim_any ON django_outbox_job "
    "(claim_lane, priority DESC, run_at, id)",
    "CREATE INDEX outbox_job_claim_queue ON django_outbox_job "
    "(claim_lane, queue, priority DESC, run_at, id)",
    "CREATE INDEX outbox_job_fair_any ON django_outbox_job "
    "(claim_lane, priority DESC, fair_round, id)",
    "CREATE INDEX outbox_job_fair_queue ON django_outbox_job "
    "(claim_lane, queue, priority DESC, fair_round, id)",
    "CREATE INDEX outbox_job_fair_round ON django_outbox_job (claim_lane, queue, fair_round)",
    "CREATE INDEX outbox_job_fair_key ON django_outbox_job "
    "(claim_lane, queue, fair_key, fair_round)",
    "CREATE INDEX outbox_job_claim_special ON django_outbox_job (claim_lane, run_at)",
    "CREATE INDEX outbox_job_lease ON django_outbox_job (status, lease_expires_at)",
    "CREATE INDEX outbox_job_lock_line ON django_outbox_job (lock_key, priority, id)",
    "CREATE INDEX outbox_job_unique_key ON django_outbox_job (unique_key)",
    "CREATE INDEX outbox_job_pending ON django_outbox_job (status, id)",
    "CREATE INDEX outbox_job_failed_task ON django_outbox_job (status, task_name, id)",
    "CREATE INDEX outbox_job_failed_queue ON django_outbox_job (status, queue, id)",
    "CREATE INDEX outbox_job_finished ON django_outbox_job (status, finished_at)",
    "CREATE INDEX outbox_job_finished_parents ON django_outbox_job "
    "(has_dependents, status, finished_at)",
    "CREATE TABLE django_outbox_enqueue_lock (slot SMALLINT NOT NULL PRIMARY KEY) ENGINE=InnoDB",
    # Every slot exists from the start: enqueuers lock a row that is there, never insert one
    # (two inserts of one key can deadlock).
    "INSERT INTO django_outbox_enqueue_lock (slot) VALUES "
    + ", ".join(f"({slot})" for slot in range(ENQUEUE_LOCK_SLOTS)),
]

DROP = [
    "DROP TABLE IF EXISTS django_outbox_enqueue_lock",
    *(
        f"DROP INDEX {name} ON django_outbox_job"
        for name in (
            "outbox_job_claim_any",
            "outbox_job_claim_queue",
            "outbox_job_fair_any",
            "outbox_job_fair_queue",
            "outbox_job_fair_round",
            "outbox_job_fair_key",
            "outbox_job_claim_special",
            "outbox_job_lease",
            "outbox_job_lock_line",
            "outbox_job_unique_key",
            "outbox_job_pending",
            "outbox_job_failed_task",
            "outbox_job_failed_queue",
            "outbox_job_finished",
            "outbox_job_finished_parents",
        )
    ),
    "ALTER TABLE django_outbox_job DROP COLUMN claim_lane",
]


class Migration(migrations.Migration):
    # DDL: MariaDB commits at each statement, and Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [
        ("django_outbox", "0016_admin_failure_time_and_payload_permission"),
    ]

    operations = [
        run_on_mysql(CREATE, DROP),
    ]
