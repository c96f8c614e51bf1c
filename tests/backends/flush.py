"""The flush the suite's backends share: which tables a flush between tests leaves alone."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.color import Style
from django.db.backends.base.operations import BaseDatabaseOperations

#: Rows every test database gets from post_migrate, the same after every flush: kept, so that
#: post_migrate finds them and writes nothing.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})


class KeepsPostMigrateRows(BaseDatabaseOperations):
    """Put before a backend's DatabaseOperations: its flush leaves ``KEPT_TABLES`` alone and
    empties the others with ``empty_tables_sql``; a flush that resets sequences or cascades
    is Django's own."""

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
        emptied = [table for table in tables if table not in KEPT_TABLES]
        return self.empty_tables_sql(style, emptied) if emptied else []

    def empty_tables_sql(self, style: Style, tables: list[str]) -> list[str]:
        raise NotImplementedError
