"""MariaDB and MySQL: generated columns in place of ``status`` in the indexes that hold jobs of
some statuses only, so that a job's claim and completion change fewer index entries.

InnoDB rewrites a secondary index's entry (a delete-marked old one, a new one) whenever one of
its columns changes. Five of the job table's indexes there started with ``status`` (or held it),
which every claim (ready to running) and every completion (running to succeeded) changes: ten
entries a job, where PostgreSQL's partial indexes of the same names take a job in or out of
their condition without touching the others. Now each has a VIRTUAL column of its own, NULL for
every job outside the partial index's condition, so that a job's entry changes only when the
job enters or leaves that condition:

- ``pending_status`` (the status of a ready, retrying or halted job) leads ``outbox_job_pending``:
  a claim changes it (the job leaves), a completion does not;
- ``failed_task`` and ``failed_queue`` (a failed job's task and queue) lead
  ``outbox_job_failed_task`` and ``outbox_job_failed_queue``, now ordered by ``finished_at``
  as PostgreSQL's are (the failed list's order): only a failure writes them;
- ``finished_status`` (the status of a succeeded, failed or cancelled job) leads
  ``outbox_job_finished``: a completion changes it, a claim does not;
- ``finished_parent`` (the same, for jobs that others depend on) leads
  ``outbox_job_finished_parents``: NULL for every job without dependents, so never written for
  them.

``outbox_job_lease`` keeps ``status``: a running job's lease is written at its claim and its
completion whatever the index holds. ``outbox_job_pending`` keeps (status, id): it also serves
every list of one status by id there, and a generated column in its place would save one entry
a job only. A plain job's claim and completion now rewrite 7 entries where they rewrote 14.

MariaDB 10.11 reads an index on a generated column only for a query that names the column: the
queries these indexes serve name them there (``db.partial_indexes``), each read in the index's
order. Not in a query that sorts what it read: MariaDB 10.11.19 returned no rows for a read of
such an index with a sort, a LIMIT and another condition, after an UPDATE of the index's columns
in the same session (tests/admin/test_list.py's pages by key in every order found it).
The columns are VIRTUAL: added without copying the table, nothing stored in its rows. Nothing on
PostgreSQL and SQLite.
"""

from django.db import migrations

TABLE = "django_outbox_job"
FINISHED = "status IN ('succeeded', 'failed', 'cancelled')"

#: Each column: its type, and its value (NULL for a job outside the index's condition). The
#: types and collations are those of the columns they copy, so that comparisons behave alike.
STATUS_COLUMNS = {
    "failed_task": ("VARCHAR(255)", "IF(status = 'failed', task_name, NULL)"),
    "failed_queue": ("VARCHAR(100)", "IF(status = 'failed', queue, NULL)"),
    "finished_status": ("VARCHAR(16)", f"IF({FINISHED}, status, NULL)"),
    "finished_parent": ("VARCHAR(16)", f"IF(has_dependents AND {FINISHED}, status, NULL)"),
}

#: Each index's columns, with the generated columns and as migration 0017 left them.
INDEXES = {
    "outbox_job_failed_task": ("failed_task, finished_at, id", "status, task_name, id"),
    "outbox_job_failed_queue": ("failed_queue, finished_at, id", "status, queue, id"),
    "outbox_job_finished": ("finished_status, finished_at, id", "status, finished_at"),
    "outbox_job_finished_parents": (
        "finished_parent, finished_at",
        "has_dependents, status, finished_at",
    ),
}


def _rebuilt_indexes(new: bool) -> str:
    """One ALTER TABLE that builds each index of ``INDEXES`` again, on the generated columns if
    ``new``, else as before: one pass over the table for all four."""
    changes = []
    for name, (generated, before) in INDEXES.items():
        changes += [f"DROP INDEX {name}", f"ADD INDEX {name} ({generated if new else before})"]
    return f"ALTER TABLE {TABLE} " + ", ".join(changes)


CREATE = [
    f"ALTER TABLE {TABLE} "
    + ", ".join(
        f"ADD COLUMN {column} {kind} AS ({expression}) VIRTUAL"
        for column, (kind, expression) in STATUS_COLUMNS.items()
    ),
    _rebuilt_indexes(new=True),
]

DROP = [
    _rebuilt_indexes(new=False),
    f"ALTER TABLE {TABLE} " + ", ".join(f"DROP COLUMN {column}" for column in STATUS_COLUMNS),
]


def _on_mysql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "mysql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    # DDL: MariaDB commits at each statement, and Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [
        ("django_outbox", "0023_mariadb_lane_columns"),
    ]

    operations = [
        migrations.RunPython(_on_mysql(CREATE), _on_mysql(DROP)),
    ]
