"""The limited claim's SQL: runnable limited jobs, passing over those whose limit is used up.

Limited jobs (a limit key: ``django_outbox.limits``) are claimed apart from the others, in
three steps: read candidates here, count each limit's use with its rows locked, then claim the
chosen ones by id (``DatabaseQueries.claim_chosen``). The same SQL serves every database: its
placeholders and clock come from the vendor's queries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import CLAIMABLE, Job, JobStatus, LimitState
from .base import DatabaseQueries, HeldBack, LimitedCandidate
from .rows import CLAIMS_LIMITED, queue_conditions

TABLE = Job._meta.db_table
LIMITS_TABLE = LimitState._meta.db_table
_CLAIMABLE = ", ".join(f"'{status}'" for status in CLAIMABLE)
#: The most used-up keys a claim names in its SQL; past it, candidates of the others are read
#: and passed over in Python.
HELD_BACK_LISTED = 200


def _in(p: str, count: int) -> str:
    return f"({', '.join([p] * count)})"


def limited_candidates_sql(
    p: str,
    due_by: str,
    queues: Sequence[str] | None,
    paused_retries: Sequence[str],
    held_back: HeldBack,
    limit: int,
    excluded_queues: Sequence[str] = (),
    conditions_added: str = "",
) -> tuple[str, list[Any]]:
    """The candidates' query and its parameters, for placeholder ``p`` and clock ``due_by``
    (with ``conditions_added``, SQL without parameters, among its conditions).

    Along the partial indexes of limited jobs (``outbox_job_limited_*``). Used-up limits are
    left out in the WHERE, so that a capped key's backlog is passed over inside the database,
    not row by row in Python, and the jobs behind it are found within the window.
    """
    pick, order = CLAIMS_LIMITED
    queue_terms, queue_params = queue_conditions(p, queues, excluded_queues, paused_retries)
    where: list[str] = list(queue_terms)
    params: list[Any] = list(queue_params)
    if held_back.tasks:
        where.append(f"task_name NOT IN {_in(p, len(held_back.tasks))}")
        params += sorted(held_back.tasks)
    if held_back.queues:
        where.append(f"queue NOT IN {_in(p, len(held_back.queues))}")
        params += sorted(held_back.queues)
    for column, pairs in (("task_name", held_back.task_keys), ("queue", held_back.queue_keys)):
        for name, key in sorted(pairs)[:HELD_BACK_LISTED]:
            where.append(f"NOT ({column} = {p} AND limit_key = {p})")
            params += [name, key]
    conditions = "".join(f"\n      AND {condition}" for condition in where) + conditions_added
    sql = f"""
SELECT id, task_name, queue, limit_key FROM {TABLE} AS candidate
WHERE status IN ({_CLAIMABLE}) AND run_at <= {due_by}{conditions}{pick}
ORDER BY {order}
LIMIT {int(limit)}
"""
    return sql, params


def limited_candidates(
    queries: DatabaseQueries,
    connection: BaseDatabaseWrapper,
    queues: Sequence[str] | None,
    paused_retries: Sequence[str],
    held_back: HeldBack,
    limit: int,
    excluded_queues: Sequence[str] = (),
) -> list[LimitedCandidate]:
    """``DatabaseQueries.limited_candidates`` for a database that reads this SQL as written."""
    sql, params = limited_candidates_sql(
        queries.placeholder,
        queries.due_by,
        queues,
        paused_retries,
        held_back,
        limit,
        excluded_queues,
    )
    # Planned with the names at hand: the held-back list changes from claim to claim.
    _, rows = queries.execute_replanned(connection, sql, params)
    return [LimitedCandidate(*row) for row in rows]


def limits_read_sql(p: str, clock: str, clock_seconds: str, quote: Callable[[str], str]) -> str:
    """What a limited claim reads of its limits, in one statement: the clock (seconds since
    the epoch), the limits' rows of whole tasks and queues and those paused or with fewer
    tokens than the parameter (as last written), and the jobs running, counted by task, queue
    and limit key.

    For placeholder ``p``, clocks ``clock`` and ``clock_seconds``, and ``quote`` for names
    (``key`` is a reserved word in MariaDB). Each row starts with what it is: "clock" (the
    seconds in its sixth column), "limit" (id, kind, name, key, tokens, refilled_at,
    paused_until) or "running" (count, task_name, queue, limit_key).
    """
    key = quote("key")
    return f"""
SELECT 'clock', NULL, NULL, NULL, NULL, {clock_seconds}, NULL, NULL
UNION ALL
SELECT 'limit', id, kind, name, {key}, tokens, refilled_at, paused_until FROM {LIMITS_TABLE}
WHERE {key} = '' OR paused_until > {clock_seconds} OR tokens < {p}
UNION ALL
SELECT 'running', COUNT(*), task_name, queue, limit_key, NULL, NULL, NULL FROM {TABLE}
WHERE status = '{JobStatus.RUNNING}' AND lease_expires_at > {clock}
GROUP BY task_name, queue, limit_key
"""
