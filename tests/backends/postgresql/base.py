"""Django's PostgreSQL backend, flushing with DELETE (see ``tests.backends``)."""

from __future__ import annotations

from django.core.management.color import Style
from django.db.backends.postgresql import base, operations

from ..flush import KeepsPostMigrateRows


class DatabaseOperations(KeepsPostMigrateRows, operations.DatabaseOperations):
    def empty_tables_sql(self, style: Style, tables: list[str]) -> list[str]:
        # Django's foreign keys are DEFERRABLE: deferred, the DELETEs can run in any order.
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"DELETE FROM {self.quote_name(table)};" for table in tables
        ]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
