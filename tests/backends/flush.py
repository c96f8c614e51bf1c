"""The flush the suite's backends share: which tables a flush between tests leaves alone."""

from __future__ import annotations

from collections.abc import Iterable

#: Rows every test database gets from post_migrate, the same after every flush: kept, so that
#: post_migrate finds them and writes nothing.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})


def tables_to_empty(tables: Iterable[str]) -> list[str]:
    return [table for table in tables if table not in KEPT_TABLES]
