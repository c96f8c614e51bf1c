"""Django's PostgreSQL backend, flushing with DELETE (see ``tests.backends``)."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.color import Style
from django.db.backends.postgresql import base, operations

from ..flush import tables_to_empty


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self,
        style: Style,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade:
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        emptied = tables_to_empty(tables)
        if not emptied:
            return []
        # Django's foreign keys are DEFERRABLE: deferred, the DELETEs can run in any order.
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"DELETE FROM {self.quote_name(table)};" for table in emptied
        ]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
