"""SQLite's reads for people: durations from julianday, counts along covering indexes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper

from ..reports import DatabaseReports, Durations, nearest_rank_durations, union_of_slices


class SQLiteReports(DatabaseReports):
    vendor: ClassVar[str] = "sqlite"

    def seconds_between(self, start: str, end: str) -> str:
        return f"(julianday({end}) - julianday({start})) * 86400.0"

    def minute_bucket(self, column: str) -> str:
        # Rounded to the second: julianday's floating point puts 10:00 at 9:59.999...
        return f"CAST((ROUND((julianday({column}) - 2440587.5) * 86400.0) - %s) / %s AS INTEGER)"

    def durations(
        self, cursor: Any, source: str, params: Sequence[Any], percentiles: Sequence[int]
    ) -> Durations:
        # SQLite has no percentile function.
        return nearest_rank_durations(cursor, source, params, percentiles)

    def slices_sql(
        self,
        connection: BaseDatabaseWrapper,
        one_slice: str,
        params: Sequence[Any],
        lows: Sequence[datetime.datetime],
        highs: Sequence[datetime.datetime],
    ) -> tuple[str, list[Any]]:
        return union_of_slices(connection, one_slice, params, lows, highs)


reports = SQLiteReports()
