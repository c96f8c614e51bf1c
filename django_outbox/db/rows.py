"""Turning claimed rows into ClaimedJob objects, the same for every database."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from ..claimed import ClaimedJob
from ..models import IN_LINE, Job, JobDependency, JobStatus
from .base import ClaimKind

#: The columns every claim query returns, in this order.
CLAIM_COLUMNS = (
    "id, task_name, queue, payload, attempts, max_attempts, priority, lease_token, resume_data, "
    "context"
)


#: The claim's condition for a candidate row (aliased ``candidate``) of a lock key: no other
#: job of its key is running, or waits ahead of it in the key's line (higher priority, or the
#: same and enqueued earlier), whatever its run_at: a retrying or halted job keeps its place.
#: Unkeyed rows pass at the first test. Both databases read it the same way.
LINE_CONDITION = f"""
      AND (candidate.lock_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {Job._meta.db_table} AS ahead
          WHERE ahead.lock_key = candidate.lock_key
            AND ahead.status IN ({", ".join(f"'{status}'" for status in IN_LINE)})
            AND (ahead.status = '{JobStatus.RUNNING}'
                 OR ahead.priority > candidate.priority
                 OR (ahead.priority = candidate.priority AND ahead.id < candidate.id))
      ))"""


#: The claim's condition for a candidate that depends on other jobs: every one of them has
#: succeeded (a job deleted by hand counts as not succeeded: the dependent waits). Jobs without
#: dependencies pass at the first test.
DEPENDENCY_CONDITION = f"""
      AND (NOT candidate.has_dependencies OR NOT EXISTS (
          SELECT 1 FROM {JobDependency._meta.db_table} AS dependency
          LEFT JOIN {Job._meta.db_table} AS parent ON parent.id = dependency.depends_on_id
          WHERE dependency.job_id = candidate.id
            AND (parent.id IS NULL OR parent.status <> '{JobStatus.SUCCEEDED}')
      ))"""
#: Fair jobs are claimed apart (the FAIR claim), in their own order; limited jobs (a limit
#: key) by the limited claim, which counts each limit's use.
NOT_FAIR = """
      AND candidate.fair_key IS NULL AND candidate.limit_key IS NULL"""
#: What a full claim adds to its pick of runnable rows.
PICK_CONDITIONS = NOT_FAIR + LINE_CONDITION + DEPENDENCY_CONDITION
#: What a plain claim adds instead: it leaves keyed and dependent jobs to a full claim, and
#: spares the set-up of the two conditions' subplans at every run (see ``ClaimPolicy``).
PLAIN_PICK = (
    NOT_FAIR
    + """
      AND candidate.lock_key IS NULL AND NOT candidate.has_dependencies"""
)
#: Keyed or dependent jobs that a full claim could consider now (none of them fair: constraint
#: outbox_job_fair_alone).
SPECIAL_WAITING = "(lock_key IS NOT NULL OR has_dependencies) AND limit_key IS NULL"
#: The claim's order: priority, then due time, then enqueue order.
CLAIM_ORDER = "priority DESC, run_at, id"
#: The fair claim's: priority, then round (fairness.py), then enqueue order. A fair job has
#: neither a lock key nor dependencies (constraint outbox_job_fair_alone): no conditions.
FAIR_PICK = """
      AND candidate.fair_key IS NOT NULL AND candidate.limit_key IS NULL"""
FAIR_ORDER = "priority DESC, fair_round, id"

#: The limited claim's candidates: limited jobs, fair ones by round, their lock keys' lines and
#: dependencies checked (``django_outbox.limits`` then counts each limit's use).
LIMITED_PICK = (
    """
      AND candidate.limit_key IS NOT NULL"""
    + LINE_CONDITION
    + DEPENDENCY_CONDITION
)
LIMITED_ORDER = "priority DESC, fair_round, run_at, id"
CLAIMS_LIMITED = (LIMITED_PICK, LIMITED_ORDER)


def queue_conditions(
    placeholder: str,
    queues: Sequence[str] | None,
    excluded_queues: Sequence[str] = (),
    paused_retries: Sequence[str] = (),
) -> tuple[list[str], list[str]]:
    """The claims' conditions on the queue, each a SQL term for ``placeholder``'s driver, and
    their parameters in order: one of ``queues`` (any when empty), none of
    ``excluded_queues``, and no retrying job of the ``paused_retries`` queues (see
    ``pacing``). PostgreSQL's claims pass arrays instead and need none of it."""

    def among(values: Sequence[str]) -> str:
        return f"({', '.join([placeholder] * len(values))})"

    terms: list[str] = []
    params: list[str] = []
    if queues:
        terms.append(f"queue IN {among(queues)}")
        params += queues
    if excluded_queues:
        terms.append(f"queue NOT IN {among(excluded_queues)}")
        params += excluded_queues
    if paused_retries:
        terms.append(f"NOT (status = '{JobStatus.RETRYING}' AND queue IN {among(paused_retries)})")
        params += paused_retries
    return terms, params


def and_terms(terms: Sequence[str]) -> str:
    """``terms`` as a filter to append to a WHERE clause: `` AND a AND b``."""
    return "".join(f" AND {term}" for term in terms)


#: Each claim's conditions and order.
CLAIMS = {
    ClaimKind.PLAIN: (PLAIN_PICK, CLAIM_ORDER),
    ClaimKind.FULL: (PICK_CONDITIONS, CLAIM_ORDER),
    ClaimKind.FAIR: (FAIR_PICK, FAIR_ORDER),
}


def claimed_jobs(rows: Iterable[Sequence[Any]], worker_id: str) -> list[ClaimedJob]:
    """Build jobs from claim rows, highest priority first, then oldest.

    Payloads stay as stored until the job's attempt decodes them: a row whose payload cannot be
    decoded fails on its own, not the claim of every job with it.
    """
    jobs = []
    for row in rows:
        (
            job_id,
            task_name,
            queue,
            payload,
            attempts,
            max_attempts,
            priority,
            token,
            resumed,
            context,
        ) = row
        jobs.append(
            ClaimedJob(
                id=job_id,
                task_name=task_name,
                queue=queue,
                stored_payload=payload,
                attempts=attempts,
                max_attempts=max_attempts,
                priority=priority,
                lease_token=token if isinstance(token, uuid.UUID) else uuid.UUID(token),
                worker_id=worker_id,
                stored_resume_data=resumed,
                stored_context=context,
            )
        )
    # UPDATE ... RETURNING gives rows in no particular order.
    jobs.sort(key=lambda job: (-job.priority, job.id))
    return jobs
