"""One write of each kind the enqueue figures compare, in a transaction of its own.

The bench's enqueueing clients (``clients``, in processes of their own) and ``measure`` (in
this process) both run these.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from django.db import connections, transaction

from django_outbox.conf import get_settings
from django_outbox.models import Job

from . import tasks as bench_tasks
from .tables import bare_row_model
from .tasks import QUEUE


def using() -> str:
    return get_settings().database


#: The kinds of single-row write the enqueue figures compare, in the order they run.
WRITE_KINDS = ("raw", "atomic_raw", "create", "enqueue")


#: SQLite's clock, as Django's Now() reads it.
_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def _raw_insert_sql(vendor: str) -> str:
    """The INSERT ``enqueue`` makes, as literal SQL for the driver (no ORM, no checks)."""
    placeholder, now = {
        "postgresql": ("%s", "now()"),
        "mysql": ("%s", "UTC_TIMESTAMP(6)"),
    }.get(vendor, ("?", _SQLITE_NOW))
    payload = f"{placeholder}::jsonb" if vendor == "postgresql" else placeholder
    return f"""
        INSERT INTO {Job._meta.db_table} (task_name, queue, payload, status, priority, run_at,
            attempts, max_attempts, worker_id, enqueued_at, last_error, last_traceback, errors)
        VALUES ({placeholder}, {placeholder}, {payload}, 'ready', 0, {now}, 0, 1, '', {now},
            '', '', '[]')
        RETURNING id, run_at, enqueued_at
    """


def write_one(kind: str) -> Callable[[int], None]:
    """Return a function that writes one row of ``kind`` in a transaction of its own.

    ``enqueue``: a job, as a view would enqueue it. ``create``: a bare
    ``Model.objects.create()`` of a row of the same width. ``raw``: the job's INSERT on the
    driver's cursor of Django's connection between BEGIN and COMMIT: the database's own cost,
    with the job table's indexes and trigger, and no Python of Django's or ours.
    ``atomic_raw``: the same INSERT on a cursor of Django's connection inside
    ``transaction.atomic()``, as a view writes raw SQL: what enqueue costs beyond it is ours,
    since ``atomic()`` itself is Django's.
    """
    db = using()
    if kind == "enqueue":

        def enqueue_one(number: int) -> None:
            with transaction.atomic(using=db):
                bench_tasks.noop.enqueue({"n": number})

        return enqueue_one
    if kind == "raw":
        connection = connections[db]
        sql = _raw_insert_sql(connection.vendor)
        task_name = bench_tasks.noop.name

        def insert_one(number: int) -> None:
            connection.ensure_connection()
            cursor = connection.connection.cursor()
            try:
                cursor.execute("BEGIN")
                cursor.execute(sql, (task_name, QUEUE, json.dumps({"n": number})))
                cursor.fetchall()
                cursor.execute("COMMIT")
            finally:
                cursor.close()

        return insert_one
    if kind == "atomic_raw":
        connection = connections[db]
        sql = _raw_insert_sql(connection.vendor).replace("?", "%s")
        task_name = bench_tasks.noop.name

        def insert_in_atomic(number: int) -> None:
            with transaction.atomic(using=db), connection.cursor() as cursor:
                cursor.execute(sql, (task_name, QUEUE, json.dumps({"n": number})))
                cursor.fetchall()

        return insert_in_atomic
    bare_row = bare_row_model()

    def create_one(number: int) -> None:
        with transaction.atomic(using=db):
            bare_row._default_manager.using(db).create(
                task_name=bench_tasks.noop.name, queue=QUEUE, payload={"n": number}, max_attempts=1
            )

    return create_one


def rate_in_this_process(kind: str, count: int) -> float:
    operation = write_one(kind)
    for number in range(-20, 0):
        operation(number)
    started = time.perf_counter()
    for number in range(count):
        operation(number)
    return count / (time.perf_counter() - started)
