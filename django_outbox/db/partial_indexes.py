"""Partial indexes' conditions spelled out as SQL, so that SQLite uses the indexes.

SQLite uses a partial index only when the query's WHERE holds the index's condition term for
term, with the values written out: ``status = %s`` (or ``IN (%s, %s)``, as the ORM writes them)
does not imply ``status IN ('succeeded', 'failed', 'cancelled')`` to it, and it scans the table
(and sorts it, for an ORDER BY). Adding the condition changes nothing on PostgreSQL. Put it after
the ORM's terms: SQLite takes the first term on the indexed column as the index's key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models
from django.db.models.expressions import RawSQL

from ..models import FINISHED, JobStatus

#: MariaDB's and MySQL's generated columns (migration 0024): each holds a job's status when the
#: status is one of its group's, NULL otherwise. A condition on statuses of one group names the
#: group's column: the same rows, along the column's index.
STATUS_COLUMNS = ((frozenset(FINISHED), "finished_status"),)
#: The same for finished jobs that other jobs depend on (``outbox_job_finished_parents``).
FINISHED_PARENT_COLUMN = "finished_parent"


def status_column(statuses: Sequence[str], vendor: str) -> str:
    """The column a condition on ``statuses`` names on ``vendor``: ``status``, or on MariaDB
    the generated column of the group the statuses are all in."""
    if vendor == "mysql":
        for group, column in STATUS_COLUMNS:
            if group.issuperset(statuses):
                return column
    return "status"


def _in(column: str, statuses: Sequence[str]) -> str:
    """``column IN ('a', 'b')``, or ``= 'a'``, the statuses checked (never user input)."""
    for status in statuses:
        if status not in JobStatus.values:
            raise ValueError(f"{status!r} is not a job status.")
    quoted = ", ".join(f"'{status}'" for status in statuses)
    return f"{column} IN ({quoted})" if len(statuses) > 1 else f"{column} = {quoted}"


def index_condition(
    statuses: Sequence[str],
    *,
    fair: bool | None = None,
    limited: bool | None = None,
    vendor: str = "",
    status: str | None = None,
) -> str:
    """A partial index's condition as SQL literals: ``status IN ('a', 'b')``, and whether
    ``fair_key`` and ``limit_key`` are NULL.

    SQLite uses a partial index only when the query's WHERE holds the index's condition term
    for term, with the values written out: ``status = %s`` (or ``IN (%s, %s)``, as the ORM
    writes them) does not let it, and it scans the table. Harmless on PostgreSQL. On MariaDB
    (``vendor`` "mysql"), the condition on the index's generated column, narrowed to ``status``
    (the one the query reads) if given: the column's index is then read for that status alone,
    in its order (``finished_at``), where an IN of three would sort what it read.
    """
    if vendor == "mysql":
        condition = _in(status_column(statuses, vendor), [status] if status else statuses)
    else:
        condition = _in("status", statuses)
    if fair is not None:
        condition += " AND fair_key IS " + ("NOT NULL" if fair else "NULL")
    if limited is not None:
        condition += " AND limit_key IS " + ("NOT NULL" if limited else "NULL")
    return condition


class InPartialIndex(RawSQL):
    """A filter term: ``index_condition``, and ``has_dependents`` when ``parents`` (the
    condition of ``outbox_job_finished_parents``), in each database's spelling.

    A RawSQL, which Django puts in a WHERE as it is: another expression would be compared
    with True on SQLite (``... = 1``), which no longer matches the index's condition.
    """

    def __init__(
        self, statuses: Sequence[str], *, parents: bool = False, status: str | None = None
    ) -> None:
        super().__init__(index_condition(statuses), [], output_field=models.BooleanField())
        self.statuses = tuple(statuses)
        self.parents = parents
        self.status = status

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        if connection.vendor == "mysql":
            if self.parents:
                return _in(FINISHED_PARENT_COLUMN, [self.status] if self.status else FINISHED), []
            sql = index_condition(self.statuses, vendor=connection.vendor, status=self.status)
            return sql, []
        if not self.parents:
            return self.sql, []
        # As the migration wrote it, which depends on the Django version that ran it: Django 6
        # writes "has_dependents" = 1, Django 5.2 plain "has_dependents". SQLite matches the
        # terms as written, so its WHERE holds both (a database migrated under either).
        parents = (
            "has_dependents AND has_dependents = 1"
            if connection.vendor == "sqlite"
            else "has_dependents"
        )
        return f"{parents} AND {self.sql}", []


def in_partial_index(
    statuses: Sequence[str], *, parents: bool = False, status: str | None = None
) -> InPartialIndex:
    """A filter for querysets along a partial index: ``jobs.filter(in_partial_index(...))``;
    ``status``, the one of ``statuses`` the query reads (MariaDB's spelling narrows to it)."""
    return InPartialIndex(statuses, parents=parents, status=status)
