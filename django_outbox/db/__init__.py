"""Queries that differ by database: one module per vendor, each a ``DatabaseQueries``.

``queries_for(connection)`` returns the one for a connection's database. Everything the ORM
can say the same way on every database lives in ``django_outbox.transitions`` instead.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from . import postgresql, sqlite
from .base import DatabaseQueries

T = TypeVar("T")


_QUERIES: dict[str, DatabaseQueries] = {
    queries.vendor: queries for queries in (postgresql.queries, sqlite.queries)
}


def queries_for(connection: BaseDatabaseWrapper) -> DatabaseQueries:
    """Return the queries for ``connection``'s database."""
    try:
        return _QUERIES[connection.vendor]
    except KeyError:
        raise NotImplementedError(
            f"django-outbox supports PostgreSQL and SQLite; database {connection.alias!r} is "
            f"{connection.vendor}."
        ) from None


def is_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked": busy, not broken; worth another try."""
    return isinstance(exc, OperationalError) and "locked" in str(exc)


def retry_while_locked(
    operation: Callable[[], T],
    *,
    give_up_after: float = 120.0,
    stopping: Callable[[], bool] | None = None,
) -> T:
    """Run ``operation``, again after a pause while SQLite reports the database locked.

    For the worker's own short writes, which hold no transaction open when they fail. Another
    database error, or a lock held longer than ``give_up_after`` seconds, is raised.
    """
    deadline = time.monotonic() + give_up_after
    pause = 0.01
    while True:
        try:
            return operation()
        except OperationalError as exc:
            if not is_lock_error(exc) or time.monotonic() > deadline or (stopping and stopping()):
                raise
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 1.0)


def write_transaction(using: str) -> AbstractContextManager[None]:
    """Return a transaction for code that reads rows and then writes them."""
    connection = connections[using]
    return queries_for(connection).write_transaction(connection)
