"""Django's SQLite backend, keeping content types and permissions at a flush (see
``tests.backends``)."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.color import Style
from django.db.backends.sqlite3 import base, operations

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
        return super().sql_flush(style, tables_to_empty(tables))


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
