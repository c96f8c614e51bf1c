"""Queries that differ by database, one module per vendor behind one interface.

Each module provides ``claim(connection, worker_id, queues, limit, lease_seconds)`` returning
the claimed jobs, ``prepare_worker_connection(connection)``, and ``write_transaction(connection)``
for transactions that read and then write. Everything the ORM can say
the same way on every database lives in ``django_outbox.transitions`` instead.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TypeVar, cast

from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from . import postgresql, sqlite

T = TypeVar("T")


def queries_for(connection: BaseDatabaseWrapper) -> ModuleType:
    """Return the query module for ``connection``'s database."""
    if connection.vendor == "postgresql":
        return postgresql
    if connection.vendor == "sqlite":
        return sqlite
    raise NotImplementedError(
        f"django-outbox supports PostgreSQL and SQLite; database {connection.alias!r} is "
        f"{connection.vendor}."
    )


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
    return cast(AbstractContextManager[None], queries_for(connection).write_transaction(connection))
