"""PostgreSQL: the limited claim in one round trip, where every limit has room to spare.

Statements sent at once (``execute_pipelined``): one transaction, each statement with a
snapshot of its own. The first sets the transaction's plans and locks the rows of the whole
tasks' and queues' limits, in the order every limited claim locks them; the second, whose
snapshot is taken once those locks are held (every claim that held them before has
committed), counts the jobs running under each limit, refills each bucket, claims the first
runnable jobs of the limits with room for the whole claim with half their cap and bucket to
spare, and takes their tokens. The lock is held from the first statement to the commit,
with no round trip in between. Jobs of the other limits (near their end, paused, or without a
row yet) are left for the careful claim (``django_outbox.limits.claims``), which the caller
runs when this claim comes back short.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from ...models import Job, JobStatus, LimitState
from ..base import WholeLimit

TABLE = Job._meta.db_table
LIMITS_TABLE = LimitState._meta.db_table

# Every claim locks the wholes' rows in this order (``limits.state._lock``): no two wait
# for each other. In the same statement (one statement fewer for the driver to send), the
# settings of the claim that follows, for this transaction alone, also where the worker's
# connection cannot keep settings of its own (behind a pooler): index scans only. The count
# of running jobs walks outbox_job_lease, whose entries of finished jobs stay until a VACUUM:
# a bitmap scan reads the row of each of them at every claim and never marks them dead (5 ms
# a claim after 60,000 jobs, planned from statistics taken while few jobs ran); an index scan
# marks them dead the first time, and the claims after it skip them (0.03 ms). JIT off: a
# plan whose alternatives are disabled costs more than its threshold, and compiling took
# longer than the claim. Prepared (``prepare_threshold``), the claim runs one generic plan:
# PostgreSQL otherwise planned it anew at every claim (its generic plan costed above the
# custom ones), 1.4 ms of planning for 2.8 ms of running, made while this claim held the
# limits' rows and the other workers' claims waited for them.
LOCK_SQL = f"""
SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
       ARRAY(
           SELECT id FROM {LIMITS_TABLE}
           WHERE key = '' AND (kind, name) IN (
               SELECT kind, name FROM json_to_recordset(%s::json) AS declared(kind text, name text)
           )
           ORDER BY kind, name, key
           FOR UPDATE
       )
"""

# The clock is read once the locks are held (clock_timestamp(): statement_timestamp() is
# when the query arrived, before any wait), so that refills and leases count from then.
# A limit without its row is "short": its jobs wait for the careful claim, which creates it.
ROOM_SQL = f"""
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at, extract(epoch FROM clock_timestamp()) AS seconds
), declared AS (
    SELECT * FROM json_to_recordset(%s::json)
        AS declared(kind text, name text, cap int, per_second float8, burst float8)
), running AS MATERIALIZED (
    -- Along outbox_job_lease, once for every cap: running jobs are few, however many wait.
    SELECT task_name, queue, count(*) AS jobs FROM {TABLE}
    WHERE status = '{JobStatus.RUNNING}' AND lease_expires_at > (SELECT at FROM clock)
    GROUP BY task_name, queue
), state AS MATERIALIZED (
    SELECT declared.*, limit_row.id AS row_id,
        limit_row.paused_until > clock.seconds AS paused,
        CASE
            WHEN declared.per_second IS NULL THEN NULL
            WHEN limit_row.tokens IS NULL OR limit_row.refilled_at IS NULL THEN declared.burst
            ELSE LEAST(declared.burst, limit_row.tokens
                + GREATEST(0, clock.seconds - limit_row.refilled_at) * declared.per_second)
        END AS tokens,
        CASE WHEN declared.cap IS NULL THEN 0 ELSE (
            SELECT COALESCE(sum(running.jobs), 0) FROM running
            WHERE CASE declared.kind WHEN 'task' THEN running.task_name ELSE running.queue END
                = declared.name
        ) END AS running
    FROM declared CROSS JOIN clock
    LEFT JOIN {LIMITS_TABLE} AS limit_row
        ON limit_row.kind = declared.kind AND limit_row.name = declared.name
        AND limit_row.key = ''
), short AS MATERIALIZED (
    SELECT kind, name FROM state
    WHERE row_id IS NULL OR paused
       OR cap / 2.0 - running < %s
       OR tokens - burst / 2.0 < %s
), paused_keys AS MATERIALIZED (
    SELECT kind, name, key FROM {LIMITS_TABLE}
    WHERE key <> '' AND paused_until > (SELECT seconds FROM clock)
)"""

# The candidates' query (``limited_candidates_sql``) gets these conditions: no limit of the
# job short, no key of it paused.
WITH_ROOM = """
      AND candidate.task_name NOT IN (SELECT name FROM short WHERE kind = 'task')
      AND candidate.queue NOT IN (SELECT name FROM short WHERE kind = 'queue')
      AND NOT EXISTS (
          SELECT 1 FROM paused_keys
          WHERE paused_keys.key = candidate.limit_key
            AND ((paused_keys.kind = 'task' AND paused_keys.name = candidate.task_name)
                 OR (paused_keys.kind = 'queue' AND paused_keys.name = candidate.queue))
      )"""


def _claimed(claim_picked: str) -> str:
    """The claim's UPDATE (``claim_picked``: the plain claim's, of the ids ``picked``), its
    leases and starts from the clock read under the locks, each row with its limit key first."""
    return (
        claim_picked.replace("%(lease_seconds)s", "%s")
        .replace("%(worker_id)s", "%s")
        .replace("lease_expires_at = now()", "lease_expires_at = (SELECT at FROM clock)")
        .replace("started_at = now()", "started_at = (SELECT at FROM clock)")
        .replace("RETURNING ", "RETURNING job.limit_key, ", 1)
    )


# One token per claimed job from each bucket of its limits; the refill time never goes back
# (a later refill would count the same seconds twice). The first column says how many limits
# were short or keys paused (their jobs were passed over); a claim that found nothing still
# returns that row.
SPEND_SQL = f"""
, spent AS (
    UPDATE {LIMITS_TABLE} AS limit_row
    SET tokens = state.tokens - taken.jobs,
        refilled_at = GREATEST(clock.seconds, COALESCE(limit_row.refilled_at, clock.seconds))
    FROM state CROSS JOIN clock CROSS JOIN LATERAL (
        SELECT count(*) AS jobs FROM claimed
        WHERE CASE state.kind WHEN 'task' THEN claimed.task_name ELSE claimed.queue END
            = state.name
    ) AS taken
    WHERE limit_row.id = state.row_id AND state.per_second IS NOT NULL AND taken.jobs > 0
)
SELECT (SELECT count(*) FROM short) + (SELECT count(*) FROM paused_keys), claimed.*
FROM (SELECT 1) AS one LEFT JOIN claimed ON true
"""


def claim_in_one_trip_sql(
    claim_picked: str,
    candidates: str,
    candidate_params: list[Any],
    limits: Sequence[WholeLimit],
    count: int,
    lease_seconds: float,
    worker_id: str,
) -> list[tuple[str, list[Any]]]:
    """The two statements with their parameters: ``candidates`` is the limited candidates'
    query (``%s`` placeholders, without its lock clause) with ``WITH_ROOM`` among its
    conditions; ``claim_picked`` the plain claim's UPDATE of the ids ``picked``."""
    declared = _declared_json(tuple(limits))
    claim_params: list[Any] = [
        declared,
        count,
        count,
        *candidate_params,
        lease_seconds,
        worker_id,
    ]
    return [(LOCK_SQL, [declared]), (_claim_sql(claim_picked, candidates), claim_params)]


# The limits go as one JSON parameter, and the statement's text is built once for each
# candidates' query: a claim runs for every batch, and the driver's adaptation of five arrays
# and the building of a 5 kB statement were most of its Python time.
@functools.lru_cache(maxsize=64)
def _claim_sql(claim_picked: str, candidates: str) -> str:
    return (
        f"{ROOM_SQL}, picked AS ({candidates}FOR UPDATE SKIP LOCKED\n), "
        f"claimed AS ({_claimed(claim_picked)}){SPEND_SQL}"
    )


@functools.lru_cache(maxsize=16)
def _declared_json(limits: tuple[WholeLimit, ...]) -> str:
    return json.dumps(
        [
            {
                "kind": limit.kind,
                "name": limit.name,
                "cap": limit.cap,
                "per_second": limit.per_second,
                "burst": limit.burst,
            }
            for limit in limits
        ]
    )
