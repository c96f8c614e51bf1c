"""Everything that differs by database, behind one interface: ``DatabaseQueries``.

``queries_for(connection)`` returns the implementation for a connection's database, one module
per vendor (``postgresql``, ``sqlite``); callers ask it, and never test ``connection.vendor``
themselves. Beside them: riding out database errors (``outage``, and ``retry_while_locked``
here), the SQL of fair rounds (``fair_rounds``), conditions of the partial indexes
(``partial_indexes``), time limits on slow reads (``time_limits``) and turning claimed rows
into jobs (``rows``). Everything the ORM can say the same way on every database lives in
``django_outbox.jobs`` instead.

May import: the base modules (models, conf, claimed, exceptions, validation). Nothing above.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, NoReturn, TypeVar

from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

if TYPE_CHECKING:
    from .base import DatabaseQueries
    from .reports import DatabaseReports

T = TypeVar("T")

#: Each vendor's queries and reports, by ``connection.vendor``, once first asked for.
_QUERIES: dict[str, DatabaseQueries] = {}
_REPORTS: dict[str, DatabaseReports] = {}


def queries_for(connection: BaseDatabaseWrapper) -> DatabaseQueries:
    """Return the queries (the worker's and enqueue's SQL) for ``connection``'s database."""
    queries = _QUERIES.get(connection.vendor)
    if queries is None:
        _load_vendors()
        queries = _QUERIES.get(connection.vendor) or _unsupported(connection)
    return queries


def reports_for(connection: BaseDatabaseWrapper) -> DatabaseReports:
    """Return the reports (the statistics', the admin's and the probes' SQL) for
    ``connection``'s database."""
    reports = _REPORTS.get(connection.vendor)
    if reports is None:
        _load_vendors()
        reports = _REPORTS.get(connection.vendor) or _unsupported(connection)
    return reports


def _load_vendors() -> None:
    # The vendors' modules write their SQL with the models' table names: imported at the first
    # query, after the app registry is ready (this package is imported before it).
    from .postgresql import queries as postgresql_queries
    from .postgresql import reports as postgresql_reports
    from .sqlite import queries as sqlite_queries
    from .sqlite import reports as sqlite_reports

    for queries in (postgresql_queries.queries, sqlite_queries.queries):
        _QUERIES[queries.vendor] = queries
    for reports in (postgresql_reports.reports, sqlite_reports.reports):
        _REPORTS[reports.vendor] = reports


def _unsupported(connection: BaseDatabaseWrapper) -> NoReturn:
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
    return queries_for(connection).write_transaction(connection)
