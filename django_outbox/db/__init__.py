"""Everything that differs by database, behind one interface: ``DatabaseQueries``.

``queries_for(connection)`` returns the implementation for a connection's database, one module
per vendor (``postgresql``, ``sqlite``, ``mysql`` for MariaDB and MySQL); callers ask it, and
never test ``connection.vendor`` themselves. Beside them: riding out database errors
(``outage``, and ``retry_while_locked`` here), the SQL of fair rounds (``fair_rounds``),
conditions of the partial indexes (``partial_indexes``), time limits on slow reads
(``time_limits``) and turning claimed rows into jobs (``rows``). Everything the ORM can say the
same way on every database lives in ``django_outbox.jobs`` instead.

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
    from .mysql import queries as mysql_queries
    from .mysql import reports as mysql_reports
    from .postgresql import queries as postgresql_queries
    from .postgresql import reports as postgresql_reports
    from .sqlite import queries as sqlite_queries
    from .sqlite import reports as sqlite_reports

    for queries in (postgresql_queries.queries, sqlite_queries.queries, mysql_queries.queries):
        _QUERIES[queries.vendor] = queries
    for reports in (postgresql_reports.reports, sqlite_reports.reports, mysql_reports.reports):
        _REPORTS[reports.vendor] = reports


def _unsupported(connection: BaseDatabaseWrapper) -> NoReturn:
    raise NotImplementedError(
        f"django-outbox supports PostgreSQL, SQLite, MariaDB and MySQL; database "
        f"{connection.alias!r} is {connection.vendor}."
    )


#: MariaDB's and MySQL's error codes for a deadlock (the transaction was rolled back) and a lock
#: wait timeout (the statement was).
MYSQL_DEADLOCK = 1213
MYSQL_LOCK_WAIT_TIMEOUT = 1205


def is_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` is busy, not broken, and worth another try: SQLite's "database is
    locked", MariaDB's and MySQL's deadlock or lock wait timeout."""
    if not isinstance(exc, OperationalError):
        return False
    if exc.args and exc.args[0] in (MYSQL_DEADLOCK, MYSQL_LOCK_WAIT_TIMEOUT):
        return True
    return "locked" in str(exc)


#: PostgreSQL's SQLSTATE for a statement that gave up waiting for a lock (``lock_timeout``).
POSTGRESQL_LOCK_NOT_AVAILABLE = "55P03"


def is_lock_wait(exc: BaseException) -> bool:
    """Whether ``exc`` says a lock another transaction held made a statement give up:
    ``is_lock_error``'s errors, and PostgreSQL's lock timeout (the worker bounds its lock
    waits there; its loops go on with their next round rather than try the same again)."""
    if is_lock_error(exc):
        return True
    cause = exc.__cause__
    return isinstance(exc, OperationalError) and (
        getattr(cause, "sqlstate", None) == POSTGRESQL_LOCK_NOT_AVAILABLE
    )


def retry_while_locked(
    operation: Callable[[], T],
    *,
    give_up_after: float = 120.0,
    stopping: Callable[[], bool] | None = None,
) -> T:
    """Run ``operation``, again after a pause while SQLite reports the database locked (or
    MariaDB a deadlock or a lock wait timeout: ``is_lock_error``).

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
