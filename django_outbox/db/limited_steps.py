"""The one-trip limited claim (``DatabaseQueries.claim_limited_in_one_trip``) as a few
statements in one short transaction, for databases that cannot send PostgreSQL's at once
(``postgresql/limited.py``): SQLite and MariaDB.

The vendor opens the transaction and locks the rows of the whole tasks' and queues' limits
(MariaDB, in the order every limited claim locks them; SQLite's write lock, taken at BEGIN,
keeps every other claim out already). Then, under the locks, every claim that held them before
has committed: one statement reads the clock, those rows, the paused keys and the jobs running
by task and queue (``read_room``); the limits with room for the whole claim with half their cap
and bucket to spare are told apart from the others in Python (``Room.held_back``); the vendor
claims the first runnable jobs of the limits with room; and one statement takes their tokens
(``spend_tokens``). What the claim does between the statements is a few lines of arithmetic:
the locks (on SQLite, the only write lock) are held for the statements alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Job, JobStatus, LimitState
from .base import DatabaseQueries, HeldBack, WholeLimit
from .limited import HELD_BACK_LISTED

TABLE = Job._meta.db_table
LIMITS_TABLE = LimitState._meta.db_table
#: The kinds of limits' rows (``limits.declared``: TASK, QUEUE).
TASK, QUEUE = "task", "queue"


def room_read_sql(clock: str, clock_seconds: str, quote: Callable[[str], str]) -> str:
    """The read under the locks, in one statement: the clock (seconds since the epoch), the
    rows of whole tasks' and queues' limits and of paused keys, and the jobs running (lease
    not expired) by task and queue.

    Each row starts with what it is: "clock" (the seconds in its sixth column), "limit" (id,
    kind, name, key, tokens, refilled_at, paused_until) or "running" (count, task_name,
    queue).
    """
    key = quote("key")
    return f"""
SELECT 'clock', NULL, NULL, NULL, NULL, {clock_seconds}, NULL, NULL
UNION ALL
SELECT 'limit', id, kind, name, {key}, tokens, refilled_at, paused_until FROM {LIMITS_TABLE}
WHERE {key} = '' OR paused_until > {clock_seconds}
UNION ALL
SELECT 'running', COUNT(*), task_name, queue, NULL, NULL, NULL, NULL FROM {TABLE}
WHERE status = '{JobStatus.RUNNING}' AND lease_expires_at > {clock}
GROUP BY task_name, queue
"""


@dataclass(frozen=True)
class _Row:
    id: int
    tokens: float | None
    refilled_at: float | None
    paused_until: float | None


@dataclass
class Room:
    """What ``read_room`` read: the clock, the wholes' rows, the paused keys, the jobs
    running under each whole task and queue."""

    now: float
    wholes: dict[tuple[str, str], _Row]
    paused_keys: set[tuple[str, str, str]]
    running: Counter[tuple[str, str]]

    def tokens(self, limit: WholeLimit) -> float:
        """The tokens in ``limit``'s bucket now (refilled since last written; a bucket never
        used is full)."""
        assert limit.per_second is not None
        assert limit.burst is not None
        row = self.wholes[(limit.kind, limit.name)]
        if row.tokens is None or row.refilled_at is None:
            return limit.burst
        gained = max(0.0, self.now - row.refilled_at) * limit.per_second
        return min(limit.burst, row.tokens + gained)

    def held_back(
        self, limits: Sequence[WholeLimit], count: int, keyed: HeldBack
    ) -> tuple[HeldBack, bool] | None:
        """What a claim of ``count`` passes over: ``keyed``, the limits without room for it
        all with half their cap and bucket to spare (or without a row, or paused), the paused
        keys; and whether any limit or key was passed over. None where the paused keys are
        too many to name in the claim's SQL (the careful claim passes over them)."""
        short: dict[str, set[str]] = {TASK: set(), QUEUE: set()}
        for limit in limits:
            row = self.wholes.get((limit.kind, limit.name))
            if (
                row is None
                or (limit.cap is not None and limit.cap / 2 - self._running(limit) < count)
                or (limit.burst is not None and self.tokens(limit) - limit.burst / 2 < count)
            ):
                short[limit.kind].add(limit.name)
        for (kind, name), row in self.wholes.items():
            # Paused, whether declared limits name it or not (``pause(per="queue")``).
            if row.paused_until is not None and row.paused_until > self.now:
                short[kind].add(name)
        if len(self.paused_keys) > HELD_BACK_LISTED:
            return None
        passed_over = HeldBack(
            tasks=frozenset(short[TASK]),
            queues=frozenset(short[QUEUE]),
            task_keys=frozenset((n, k) for kind, n, k in self.paused_keys if kind == TASK),
            queue_keys=frozenset((n, k) for kind, n, k in self.paused_keys if kind == QUEUE),
        )
        return keyed | passed_over, passed_over != HeldBack()

    def _running(self, limit: WholeLimit) -> int:
        position = 0 if limit.kind == TASK else 1
        return sum(jobs for group, jobs in self.running.items() if group[position] == limit.name)


def read_room(queries: DatabaseQueries, connection: BaseDatabaseWrapper) -> Room:
    """Read the clock, the limits' rows and the running jobs (``room_read_sql``): call with
    the wholes' rows locked."""
    sql = room_read_sql(queries.clock, queries.clock_seconds, connection.ops.quote_name)
    _, rows = queries.execute(connection, sql, ())
    room = Room(now=0.0, wholes={}, paused_keys=set(), running=Counter())
    for what, number, kind, name, key, *floats in rows:
        if what == "clock":
            room.now = float(floats[0])
        elif what == "limit":
            tokens, refilled_at, paused_until = (
                None if value is None else float(value) for value in floats
            )
            if key:
                room.paused_keys.add((kind, name, key))
            else:
                room.wholes[(kind, name)] = _Row(int(number), tokens, refilled_at, paused_until)
        else:
            room.running[(kind, name)] += int(number)
    return room


def spend_tokens(
    queries: DatabaseQueries,
    connection: BaseDatabaseWrapper,
    room: Room,
    limits: Sequence[WholeLimit],
    claimed: Iterable[tuple[str, str]],
) -> None:
    """Take one token per job of ``claimed`` (task name, queue) from each bucket of
    ``limits`` over it, in one statement (none where no bucket lost a token). The refill time
    never goes back: a later refill would count the same seconds twice."""
    by_task: Counter[str] = Counter()
    by_queue: Counter[str] = Counter()
    for task_name, queue in claimed:
        by_task[task_name] += 1
        by_queue[queue] += 1
    spent: list[tuple[int, float, float]] = []
    for limit in limits:
        taken = (by_task if limit.kind == TASK else by_queue)[limit.name]
        if limit.per_second is None or not taken:
            continue
        row = room.wholes[(limit.kind, limit.name)]
        refilled_at = max(room.now, row.refilled_at or room.now)
        spent.append((row.id, room.tokens(limit) - taken, refilled_at))
    if not spent:
        return
    p = queries.placeholder
    cases = " ".join([f"WHEN {p} THEN {p}"] * len(spent))
    sql = (
        f"UPDATE {LIMITS_TABLE} SET tokens = CASE id {cases} END, "
        f"refilled_at = CASE id {cases} END "
        f"WHERE id IN ({', '.join([p] * len(spent))})"
    )
    params: list[Any] = [value for row_id, tokens, _ in spent for value in (row_id, tokens)]
    params += [value for row_id, _, refilled_at in spent for value in (row_id, refilled_at)]
    params += [row_id for row_id, _, _ in spent]
    queries.execute(connection, sql, params)
