"""The limited claim: limited jobs claimed within every cap and rate, across all workers.

In one short transaction on the worker's connection:

1. Count the jobs running under each limit (status running, lease not expired: a dead
   worker's job holds its place until its lease expires, no longer), and read the limits
   paused or out of tokens; what is used up is held back in the candidates' query, so that a
   capped key's backlog does not hide the jobs behind it.
2. Read candidates in the claim's order (fair ones by round).
3. Lock the rows of the capped and rate-limited scopes among them (``LimitState``), in one
   order, creating those missing. Claims of one whole task's or queue's limit take turns here
   across every worker and host; a key's row held by another claim is skipped (that claim is
   choosing the key's jobs), so claims spread over keys instead of queueing. (SQLite's write
   lock, taken at BEGIN, serializes every claim anyway.)
4. Count again under the locks (a claim that held them has committed), refill each bucket,
   and choose candidates in order while each of their limits has room and a token.
5. Claim the chosen jobs by id; take one token per job claimed from each of its buckets.

A job held back stays ready, with its attempts untouched, and is chosen by a later claim once
its limits allow: when a running job ends (the next claim, at a completion or a poll) or a
token comes (``LimitedClaim.retry_in`` says when).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import connections
from django.db.models import Count, Q
from django.db.models.functions import Now

from ..claimed import ClaimedJob
from ..db import queries_for
from ..db.base import HeldBack, LimitedCandidate
from ..models import Job, JobStatus, LimitState
from .buckets import refilled, seconds_until_token
from .declared import QUEUE, TASK, Limit, Scope, limit_on, limits_of, scopes_of

#: Candidates read per job asked for: room to pass over jobs whose limits fill up during the
#: choice, beyond those already held back in the query.
WINDOW_PER_JOB = 4
WINDOW_MIN = 32


@dataclass
class LimitedClaim:
    """What a limited claim did: the jobs it claimed; whether runnable jobs were held back by
    a limit (a later claim may take them); and, if a rate or a pause held some back, the
    seconds until the first of them may start."""

    jobs: list[ClaimedJob] = field(default_factory=list)
    held_back: bool = False
    retry_in: float | None = None

    def wait_at_most(self, seconds: float) -> None:
        self.retry_in = seconds if self.retry_in is None else min(self.retry_in, seconds)


class _Use:
    """Each scope's jobs running now, from the running jobs' (task, queue, key) counts."""

    def __init__(self, groups: Counter[tuple[str, str, str | None]]) -> None:
        self.by_scope: Counter[Scope] = Counter()
        for (task_name, queue, key), running in groups.items():
            for scope in scopes_of(task_name, queue, key or ""):
                self.by_scope[scope] += running

    def __getitem__(self, scope: Scope) -> int:
        return self.by_scope[scope]


def running_use(using: str) -> _Use:
    rows = (
        Job.objects.using(using)
        # Along outbox_job_lease: running jobs are few, however many wait.
        .filter(status=JobStatus.RUNNING, lease_expires_at__gt=Now())
        .values_list("task_name", "queue", "limit_key")
        .annotate(running=Count("id"))
        .order_by()
    )
    return _Use(Counter({(task, queue, key): running for task, queue, key, running in rows}))


def _state(row: LimitState) -> Scope:
    return Scope(row.kind, row.name, row.key)


class _Buckets:
    """The limits' rows this claim read: pauses, and tokens refilled to now."""

    def __init__(self, rows: Sequence[LimitState], now: float) -> None:
        self.now = now
        self.rows = {_state(row): row for row in rows}

    def paused_for(self, scope: Scope) -> float:
        row = self.rows.get(scope)
        if row is None or row.paused_until is None:
            return 0.0
        return max(0.0, row.paused_until - self.now)

    def tokens(self, limit: Limit) -> float:
        assert limit.rate is not None
        row = self.rows.get(limit.scope)
        if row is None:
            return float(limit.rate.burst)
        return refilled(limit.rate, row.tokens, row.refilled_at, self.now)


def _held_back(use: _Use, buckets: _Buckets, claim: LimitedClaim) -> HeldBack:
    """What the candidates' query leaves out: scopes at their cap, paused or out of tokens."""
    full: set[Scope] = set()
    for scope, running in use.by_scope.items():
        limit = limit_on(scope)
        if limit is not None and limit.cap is not None and running >= limit.cap:
            full.add(scope)
    for scope in buckets.rows:
        if (paused := buckets.paused_for(scope)) > 0:
            full.add(scope)
            claim.wait_at_most(paused)
            continue
        limit = limit_on(scope)
        if limit is not None and limit.rate is not None:
            tokens = buckets.tokens(limit)
            if tokens < 1:
                full.add(scope)
                claim.wait_at_most(seconds_until_token(limit.rate, tokens))
    if full:
        claim.held_back = True
    return HeldBack(
        tasks=frozenset(s.name for s in full if s.kind == TASK and not s.key),
        queues=frozenset(s.name for s in full if s.kind == QUEUE and not s.key),
        task_keys=frozenset((s.name, s.key) for s in full if s.kind == TASK and s.key),
        queue_keys=frozenset((s.name, s.key) for s in full if s.kind == QUEUE and s.key),
    )


def _blocked_states(using: str, now: float) -> list[LimitState]:
    """The limits' rows that may hold jobs back: paused, or low on tokens."""
    return list(
        LimitState.objects.using(using)
        .filter(Q(paused_until__gt=now) | Q(tokens__lt=1))
        # Along the unique index: the worker's claim connection plans without sequential
        # scans (PostgreSQL), and a "disabled" scan of a table without a usable index costs
        # so much that the query would be JIT-compiled.
        .order_by("kind", "name", "key")
    )


def _locked_states(using: str, scopes: set[Scope]) -> list[LimitState]:
    """Lock the rows of ``scopes`` in one order (creating those missing) and return them.

    Rows another claim created and has not committed yet are not returned: their candidates
    wait for a later claim.
    """
    ordered = sorted(scopes)
    known = _known_rows.setdefault(using, set())
    _create(using, [scope for scope in ordered if scope not in known])
    locked = _lock(using, ordered)
    if len(locked) < len(ordered) and _missing(using, ordered, locked):
        # Rows deleted since this process created them (by hand, or a test's flush).
        _create(using, ordered)
        locked = _lock(using, ordered)
    known.update(_state(row) for row in locked)
    return locked


def _missing(using: str, ordered: list[Scope], locked: list[LimitState]) -> bool:
    """Whether some rows of ``ordered`` do not exist (rather than being another claim's)."""
    matching = Q()
    for scope in ordered:
        matching |= Q(kind=scope.kind, name=scope.name, key=scope.key)
    return LimitState.objects.using(using).filter(matching).count() < len(ordered)


def _create(using: str, scopes: list[Scope]) -> None:
    if scopes:
        LimitState.objects.using(using).bulk_create(
            [LimitState(kind=s.kind, name=s.name, key=s.key) for s in scopes],
            ignore_conflicts=True,
        )


def _lock(using: str, ordered: list[Scope]) -> list[LimitState]:
    """Lock the rows of ``ordered``: a whole task's or queue's waiting for other claims (every
    candidate of it needs the row), a key's skipping those another claim holds (it is choosing
    that key's jobs now; this one takes other keys' meanwhile, on databases that can skip)."""
    locked: list[LimitState] = []
    for keyed in (False, True):
        matching = Q()
        for scope in ordered:
            if bool(scope.key) == keyed:
                matching |= Q(kind=scope.kind, name=scope.name, key=scope.key)
        if matching:
            locked += (
                LimitState.objects.using(using)
                .select_for_update(skip_locked=keyed)
                .filter(matching)
                .order_by("kind", "name", "key")
            )
    return locked


#: The limits' rows known to exist, by database alias: a claim creates only the others (in
#: steady state, one statement locks the rows). The outbox never deletes them.
_known_rows: dict[str, set[Scope]] = {}


def claim_limited(
    using: str,
    worker_id: str,
    queues: Sequence[str] | None,
    count: int,
    lease_seconds: float,
    paused_retries: Sequence[str] = (),
    *,
    excluded_queues: Sequence[str] = (),
) -> LimitedClaim:
    """Claim up to ``count`` limited jobs of ``queues`` (all but ``excluded_queues``) that
    every limit allows now."""
    connection = connections[using]
    queries = queries_for(connection)
    claim = LimitedClaim()
    # Keep this transaction short: it holds the limits' rows (on SQLite, the write lock).
    with queries.write_transaction(connection):
        now = queries.database_seconds(connection)
        blocked = _blocked_states(using, now)
        use = running_use(using)
        held_back = _held_back(use, _Buckets(blocked, now), claim)
        window = max(WINDOW_MIN, WINDOW_PER_JOB * count)
        candidates = queries.limited_candidates(
            connection, queues, paused_retries, held_back, window, excluded_queues
        )
        if not candidates:
            return claim
        limits = {c.id: limits_of(c.task_name, c.queue, c.limit_key) for c in candidates}
        counted = {limit.scope for found in limits.values() for limit in found}
        locked = _locked_states(using, counted) if counted else []
        # Under the locks, the counts include every claim that held them before (where this
        # transaction holds the only write lock, they did already). Pauses come from the first
        # read: one written since holds jobs back from the next claim.
        if not queries.one_writer:
            use = running_use(using)
            # The clock read before waiting for the locks may be behind the last refill.
            now = queries.database_seconds(connection)
        buckets = _Buckets([*blocked, *locked], now)
        locked_scopes = {_state(row) for row in locked}
        chosen = _choose(candidates, limits, use, buckets, locked_scopes, count, claim)
        if not chosen:
            return claim
        claim.jobs = queries.claim_chosen(
            connection, worker_id, [c.id for c in chosen], lease_seconds
        )
        _take_tokens(using, claim.jobs, limits, buckets)
    return claim


def _choose(
    candidates: Sequence[LimitedCandidate],
    limits: dict[int, list[Limit]],
    use: _Use,
    buckets: _Buckets,
    locked: set[Scope],
    count: int,
    claim: LimitedClaim,
) -> list[LimitedCandidate]:
    """Return the candidates, in order, that fit in every limit, up to ``count``."""
    taken: Counter[Scope] = Counter()
    spent: Counter[Scope] = Counter()
    chosen: list[LimitedCandidate] = []
    for candidate in candidates:
        if len(chosen) >= count:
            break
        pauses = [
            buckets.paused_for(scope)
            for scope in scopes_of(candidate.task_name, candidate.queue, candidate.limit_key)
        ]
        if any(pauses):
            claim.held_back = True
            claim.wait_at_most(max(pauses))
            continue
        fits = True
        for limit in limits[candidate.id]:
            if limit.scope not in locked:
                # Its row is another claim's, not yet committed: a later claim decides.
                fits = False
                continue
            if limit.cap is not None and use[limit.scope] + taken[limit.scope] >= limit.cap:
                fits = False
            if limit.rate is not None:
                tokens = buckets.tokens(limit) - spent[limit.scope]
                if tokens < 1:
                    fits = False
                    claim.wait_at_most(seconds_until_token(limit.rate, tokens))
        if not fits:
            claim.held_back = True
            continue
        chosen.append(candidate)
        for limit in limits[candidate.id]:
            taken[limit.scope] += 1
            if limit.rate is not None:
                spent[limit.scope] += 1
    return chosen


def _take_tokens(
    using: str,
    claimed: Sequence[ClaimedJob],
    limits: dict[int, list[Limit]],
    buckets: _Buckets,
) -> None:
    """Take one token per claimed job from each of its buckets (refilled to now)."""
    spent: Counter[Scope] = Counter()
    rated: dict[Scope, Limit] = {}
    for job in claimed:
        for limit in limits[job.id]:
            if limit.rate is not None:
                spent[limit.scope] += 1
                rated[limit.scope] = limit
    for scope, taken in spent.items():
        row = buckets.rows[scope]
        row.tokens = buckets.tokens(rated[scope]) - taken
        # Never back in time: a later refill would count the same seconds twice.
        row.refilled_at = max(buckets.now, row.refilled_at or buckets.now)
        row.save(using=using, update_fields=["tokens", "refilled_at"])
