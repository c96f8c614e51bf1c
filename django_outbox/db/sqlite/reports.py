"""SQLite's reads for people: durations from julianday, counts along covering indexes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper

from ..reports import DatabaseReports, Durations


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
        # SQLite has no percentile function: count, then read each percentile's row (the
        # nearest rank) in the database's order.
        cursor.execute(
            f"SELECT count(duration), avg(duration), min(duration), max(duration) FROM {source}",
            params,
        )
        count, average, shortest, longest = cursor.fetchone()
        found = []
        for percentile in percentiles if count else ():
            rank = max(0, -(-percentile * count // 100) - 1)
            cursor.execute(
                f"SELECT duration FROM {source} WHERE duration IS NOT NULL "
                "ORDER BY duration LIMIT 1 OFFSET %s",
                [*params, rank],
            )
            found.append(cursor.fetchone()[0])
        return Durations(count, average, shortest, longest, found)

    def slices_sql(
        self,
        connection: BaseDatabaseWrapper,
        one_slice: str,
        params: Sequence[Any],
        lows: Sequence[datetime.datetime],
        highs: Sequence[datetime.datetime],
    ) -> tuple[str, list[Any]]:
        parts = [
            f"SELECT * FROM ({one_slice.format(low='%s', high='%s')}) AS slice{number}"
            for number in range(len(lows))
        ]
        adapt = connection.ops.adapt_datetimefield_value
        sample_params: list[Any] = []
        for low, high in zip(lows, highs, strict=True):
            sample_params += [*params, adapt(low), adapt(high)]
        return " UNION ALL ".join(parts), sample_params


reports = SQLiteReports()
