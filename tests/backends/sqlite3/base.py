"""Django's SQLite backend, keeping content types and permissions at a flush (see
``tests.backends``)."""

from __future__ import annotations

from django.core.management.color import Style
from django.db.backends.sqlite3 import base, operations

from ..flush import KeepsPostMigrateRows


class DatabaseOperations(KeepsPostMigrateRows, operations.DatabaseOperations):
    def empty_tables_sql(self, style: Style, tables: list[str]) -> list[str]:
        # SQLite's own flush is already one DELETE a table.
        return operations.DatabaseOperations.sql_flush(self, style, tables)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
