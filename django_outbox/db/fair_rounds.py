"""Fair scheduling by key (enqueue(fair_key=...)): the round each fair job is served in.

Kept in the table: workers take the head of every key of a queue,
then the next job of every key, and so on. Each fair job gets a round at enqueue, and the fair
claim takes jobs by (priority, round, id). A key's jobs take consecutive rounds; a key with
nothing waiting joins the round being served now. So a new key's first job is among the next
jobs claimed however long another key's backlog is, and a key's backlog is interleaved with
every other key's jobs, one each per round.

The round being served is the lowest round among the queue's due waiting fair jobs (the next
to be claimed). With none due, it is the highest round of the queue's running or waiting
(scheduled for later, or retrying after a backoff) fair jobs, so that the jobs that come back
are not put behind a newcomer's backlog. A retry or a snoozed job keeps its round, and runs
soon after it is due again. (Not the highest round running: a job of high priority is claimed
ahead of its round, and would push newcomers behind every backlog.)

Concurrent enqueuers of one key wait for each other (``serialize_enqueuers``), so a key's
rounds never repeat; enqueuers of different keys do not wait for each other.
"""

from __future__ import annotations

from ..models import CLAIMABLE, Job, JobStatus

TABLE = Job._meta.db_table
_CLAIMABLE = ", ".join(f"'{status}'" for status in CLAIMABLE)

# Four looks along the partial indexes of fair jobs (outbox_job_fair_round, _fair_key) and the
# running ones (outbox_job_lease), in one round trip. {p} is the driver's placeholder and
# {due_by} the database's clock, as the claim compares it.
ROUNDS_SQL = f"""
SELECT
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE status = '{JobStatus.RUNNING}' AND queue = {{p}} AND fair_key IS NOT NULL)
    AS running,
    (SELECT fair_round FROM {TABLE}
     WHERE status IN ({_CLAIMABLE}) AND queue = {{p}} AND fair_key IS NOT NULL
       AND run_at <= {{due_by}}
     ORDER BY fair_round LIMIT 1) AS next_due,
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE status IN ({_CLAIMABLE}) AND queue = {{p}} AND fair_key IS NOT NULL)
    AS last_waiting,
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE status IN ({_CLAIMABLE}) AND queue = {{p}} AND fair_key = {{p}}) AS key_last
"""


def rounds_params(queue: str, key: str) -> tuple[str, ...]:
    """``ROUNDS_SQL``'s parameters: the queue four times, then the key."""
    return (queue, queue, queue, queue, key)


def served_round(
    running: int | None, next_due: int | None, last_waiting: int | None, key_last: int | None
) -> int:
    """Return the round of the next job of a key from ``ROUNDS_SQL``'s four figures."""
    served = next_due
    if served is None:
        served = max((r for r in (running, last_waiting) if r is not None), default=0)
    if key_last is not None:
        return max(int(served), int(key_last) + 1)
    return int(served)
