"""MariaDB's and MySQL's reads for people: durations by TIMESTAMPDIFF, and InnoDB's view of the
oldest open transaction (which holds back the purge of old row versions, as it holds back
vacuum on PostgreSQL)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper

from ..reports import (
    DatabaseReports,
    Durations,
    OpenTransaction,
    nearest_rank_durations,
    union_of_slices,
)

#: The oldest transaction of another session, as InnoDB reports it.
OLDEST_TRANSACTION_SQL = """
SELECT trx.trx_mysql_thread_id,
       TIMESTAMPDIFF(MICROSECOND, trx.trx_started, NOW(6)) / 1e6,
       trx.trx_state, COALESCE(process.USER, ''), COALESCE(process.HOST, '')
FROM information_schema.INNODB_TRX AS trx
LEFT JOIN information_schema.PROCESSLIST AS process ON process.ID = trx.trx_mysql_thread_id
WHERE trx.trx_mysql_thread_id <> CONNECTION_ID()
ORDER BY trx.trx_started
LIMIT 1
"""


class MySQLReports(DatabaseReports):
    vendor: ClassVar[str] = "mysql"

    def seconds_between(self, start: str, end: str) -> str:
        return f"(TIMESTAMPDIFF(MICROSECOND, {start}, {end}) / 1e6)"

    def minute_bucket(self, column: str) -> str:
        # From the epoch by TIMESTAMPDIFF, not UNIX_TIMESTAMP(): that reads the column in the
        # session's time zone, and Django stores UTC.
        return (
            f"CAST(FLOOR((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column}) "
            "/ 1e6 - %s) / %s) AS SIGNED)"
        )

    def durations(
        self, cursor: Any, source: str, params: Sequence[Any], percentiles: Sequence[int]
    ) -> Durations:
        # MariaDB's PERCENTILE_CONT is a window function only: one row per job.
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

    def oldest_transaction(self, connection: BaseDatabaseWrapper) -> OpenTransaction | None:
        with connection.cursor() as cursor:
            cursor.execute(OLDEST_TRANSACTION_SQL)
            row = cursor.fetchone()
        if row is None:
            return None
        thread, age, state, user, host = row
        return OpenTransaction(float(age), f"thread {thread}, {state}, {user or '-'}@{host or '-'}")


reports = MySQLReports()
