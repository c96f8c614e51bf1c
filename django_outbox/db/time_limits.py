"""Stopping a query that runs too long, on PostgreSQL, SQLite and MariaDB (the admin's search
and count)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import OperationalError, connections, transaction

# PostgreSQL's code for a statement cancelled by statement_timeout.
QUERY_CANCELED = "57014"
# MariaDB's error for a statement stopped by max_statement_time, and MySQL's by
# max_execution_time.
MARIADB_STATEMENT_TIMEOUT = 1969
MYSQL_EXECUTION_TIMEOUT = 3024


@contextmanager
def query_time_limit(using: str, seconds: float, *, serial: bool = False) -> Iterator[None]:
    """Stop any query on ``using`` that runs longer than ``seconds``, with OperationalError.

    PostgreSQL: ``statement_timeout`` for the length of a transaction (each query gets
    ``seconds``); with ``serial``, no parallel workers either, for a query expected to be
    stopped: one with workers ends only once they have (25 ms later on a loaded machine, for a
    limit of 20). SQLite: a progress handler that interrupts the running statement once
    ``seconds`` have passed since entry. MariaDB: ``max_statement_time`` for the session
    within the block; MySQL: ``max_execution_time`` (its SELECTs only).
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        settings = {"statement_timeout": f"{seconds * 1000:.0f}"}
        if serial:
            settings["max_parallel_workers_per_gather"] = "0"
        with transaction.atomic(using=using):
            previous = {}
            with connection.cursor() as cursor:
                # set_config(..., true) is SET LOCAL that takes a parameter: it ends with the
                # transaction, or with the savepoint when the request runs in ATOMIC_REQUESTS.
                for name, value in settings.items():
                    cursor.execute("SELECT current_setting(%s)", [name])
                    previous[name] = cursor.fetchone()[0]
                    cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
            yield
            with connection.cursor() as cursor:
                for name, value in previous.items():
                    cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
    elif connection.vendor == "sqlite":
        connection.ensure_connection()
        raw = connection.connection
        deadline = time.monotonic() + seconds
        # Called every 10,000 virtual machine instructions; a true result interrupts.
        raw.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
        try:
            yield
        finally:
            raw.set_progress_handler(None, 0)
    elif connection.vendor == "mysql":
        mariadb = connection.mysql_is_mariadb  # type: ignore[attr-defined]
        variable = "max_statement_time" if mariadb else "max_execution_time"
        value = f"{seconds:.3f}" if mariadb else str(max(1, round(seconds * 1000)))
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT @@SESSION.{variable}")
            previous = cursor.fetchone()[0]
            cursor.execute(f"SET SESSION {variable} = {value}")
        try:
            yield
        finally:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(f"SET SESSION {variable} = %s", [previous])
            except OperationalError:
                connection.close()
    else:
        yield


def is_time_limit(error: OperationalError) -> bool:
    """Return whether ``error`` is a query stopped by ``query_time_limit``."""
    cause = error.__cause__
    if isinstance(cause, sqlite3.OperationalError):
        return str(cause) == "interrupted"
    args = getattr(cause, "args", ())
    if args and args[0] in (MARIADB_STATEMENT_TIMEOUT, MYSQL_EXECUTION_TIMEOUT):
        return True
    return getattr(cause, "sqlstate", None) == QUERY_CANCELED or (
        getattr(cause, "pgcode", None) == QUERY_CANCELED
    )
