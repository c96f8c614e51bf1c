"""Many job rows at once, for tests of query plans on PostgreSQL and MariaDB: one INSERT ... SELECT.

Building 20,000 ``Job`` objects in Python took most of such a test's 20 s; the rows are the
same, written by the server from ``generate_series`` (MariaDB: its sequence tables).
"""

from __future__ import annotations

import datetime

from django.db import connection

from django_outbox.models import Job


def insert_jobs(
    count: int,
    *,
    task_name: str,
    status: str,
    finished_at: datetime.datetime | None = None,
    queue: str = "default",
) -> None:
    """Insert ``count`` jobs of ``task_name`` in ``status`` (PostgreSQL, MariaDB), payload
    ``{}``."""
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {Job._meta.db_table}
                  (task_name, queue, payload, status, priority, attempts, max_attempts,
                   worker_id, last_error, last_traceback, errors, finished_at)
                SELECT %s, %s, '{{}}', %s, 0, 1, 20, '', '', '', '[]', %s
                FROM seq_1_to_{int(count)}
                """,
                [task_name, queue, status, finished_at],
            )
            cursor.execute(f"ANALYZE TABLE {Job._meta.db_table}")
        return
    assert connection.vendor == "postgresql", "generate_series is PostgreSQL's"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {Job._meta.db_table}
              (task_name, queue, payload, status, priority, attempts, max_attempts, worker_id,
               last_error, last_traceback, errors, finished_at)
            SELECT %s, %s, '{{}}'::jsonb, %s, 0, 1, 20, '', '', '', '[]'::jsonb, %s
            FROM generate_series(1, %s)
            """,
            [task_name, queue, status, finished_at, count],
        )
