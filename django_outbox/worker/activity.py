"""What a worker ran, per queue and minute, counted in memory and added to ``QueueActivity`` at
each heartbeat: the dashboard's throughput and failure charts.

Counting costs a dictionary increment per attempt (under a lock of its own); writing, one
statement per heartbeat when anything finished since the last one, whatever the number of
jobs. Counts that could not be written (the database is down) are kept and written with the
next ones. A worker killed with SIGKILL loses the counts of its last heartbeat interval.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import Counter
from typing import Any

from django.db import connections

from ..db import queries_for
from ..models import QueueActivity
from .runner import Outcome

#: The outcomes counted, and the column each adds to.
COLUMNS = {Outcome.SUCCEEDED: "succeeded", Outcome.RETRYING: "retried", Outcome.FAILED: "failed"}
#: How long rows are kept: the dashboard shows the last day.
KEEP_SECONDS = 2 * 86400

# The counts of a (minute, queue) already written are added to, in each database's spelling.
UPSERT_SQL = """
INSERT INTO {table} (minute, queue, succeeded, retried, failed) VALUES {rows} {adding}
"""


class ActivityCounter:
    """Counts of attempts by (minute, queue, column), until written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[int, str, str]] = Counter()

    def add(self, queue: str, outcome: Outcome) -> None:
        column = COLUMNS.get(outcome)
        if column is not None:
            with self._lock:
                self._counts[int(time.time() // 60), queue, column] += 1

    def has_counts(self) -> bool:
        """Whether anything was counted since the last write."""
        with self._lock:
            return bool(self._counts)

    def write(self, using: str) -> int:
        """Add the counts to the table in one statement; return the rows written.

        On an error the counts are kept for the next call, and the error raised.
        """
        with self._lock:
            counts, self._counts = self._counts, Counter()
        if not counts:
            return 0
        try:
            _upsert(using, counts)
        except BaseException:
            with self._lock:
                self._counts.update(counts)
            raise
        return len({(minute, queue) for minute, queue, _ in counts})


def _upsert(using: str, counts: Counter[tuple[int, str, str]]) -> None:
    rows: dict[tuple[int, str], dict[str, int]] = {}
    for (minute, queue, column), count in counts.items():
        rows.setdefault((minute, queue), dict.fromkeys(COLUMNS.values(), 0))[column] += count
    connection = connections[using]
    params: list[Any] = []
    for (minute, queue), columns in sorted(rows.items()):
        start = datetime.datetime.fromtimestamp(minute * 60, tz=datetime.timezone.utc)
        params += [
            connection.ops.adapt_datetimefield_value(start),
            queue,
            columns["succeeded"],
            columns["retried"],
            columns["failed"],
        ]
    placeholders = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    table = QueueActivity._meta.db_table
    adding = queries_for(connection).on_conflict_add(
        table, ("minute", "queue"), ("succeeded", "retried", "failed")
    )
    sql = UPSERT_SQL.format(table=table, rows=placeholders, adding=adding)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def forget_old_activity(using: str) -> int:
    """Delete the rows older than ``KEEP_SECONDS``."""
    cutoff = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=KEEP_SECONDS)
    deleted, _ = QueueActivity.objects.using(using).filter(minute__lt=cutoff).delete()
    return deleted
