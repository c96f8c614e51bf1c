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

from ..models import JobStatus


def index_condition(
    statuses: Sequence[str], *, fair: bool | None = None, limited: bool | None = None
) -> str:
    """A partial index's condition as SQL literals: ``status IN ('a', 'b')``, and whether
    ``fair_key`` and ``limit_key`` are NULL.

    SQLite uses a partial index only when the query's WHERE holds the index's condition term
    for term, with the values written out: ``status = %s`` (or ``IN (%s, %s)``, as the ORM
    writes them) does not let it, and it scans the table. Harmless on PostgreSQL.
    """
    for status in statuses:
        if status not in JobStatus.values:
            raise ValueError(f"{status!r} is not a job status.")
    quoted = ", ".join(f"'{status}'" for status in statuses)
    condition = f"status IN ({quoted})" if len(statuses) > 1 else f"status = {quoted}"
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

    def __init__(self, statuses: Sequence[str], *, parents: bool = False) -> None:
        super().__init__(index_condition(statuses), [], output_field=models.BooleanField())
        self.parents = parents

    def as_sql(self, compiler: Any, connection: Any) -> Any:
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


def in_partial_index(statuses: Sequence[str], *, parents: bool = False) -> InPartialIndex:
    """A filter for querysets along a partial index: ``jobs.filter(in_partial_index(...))``."""
    return InPartialIndex(statuses, parents=parents)
