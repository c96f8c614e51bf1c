"""The limited claim: limited jobs claimed within every cap and rate, across all workers.

Each claim first reads, without locks, the jobs running under each limit (status running,
lease not expired: a dead worker's job holds its place until its lease expires, no longer)
and the limits paused or short of tokens; what is used up is held back in the claim's SQL, so
that a capped key's backlog does not hide the jobs behind it. Then one of two ways (first,
outside a transaction of the caller's, the one-trip claim: ``_claim_in_one_trip``, below):

- **A batch**, where limits are far from their end (a drain under limits it does not
  reach): the first runnable jobs are claimed as a plain claim would (concurrent claims pass
  over each other's rows), then the rows of their limits are locked (``LimitState``, in one
  order, created if missing), the running jobs counted again, this claim's among them, and
  the tokens taken. Claims of one limit take turns only for those last statements. Had
  concurrent claims together gone past a limit, the batch rolls back, and the claim is made
  the careful way. Per-key limits, and limits a batch would leave with less than half their
  cap or bucket, are held back from the batch and left to a careful claim when the batch
  comes back short (in the same transaction when it found nothing).
- **Carefully**, one job at a time: read candidates in the claim's order (fair ones by
  round); lock the rows of their limits, claims of one whole task's or queue's limit taking
  turns across every worker and host, a key's row held by another claim skipped (that claim
  is choosing the key's jobs), so that claims spread over keys instead of queueing; count
  again under the locks, choose candidates in order while each of their limits has room and
  a token, claim them by id, and take one token per job from each of its buckets.

A claim first tries the **one-trip claim** (``claim_limited_in_one_trip``): the whole tasks'
and queues' rows locked, then, in a statement of its own whose snapshot follows the locks,
the running jobs counted, the jobs of limits with room for the whole claim with half to spare
claimed and their tokens taken: one round trip on PostgreSQL; on SQLite and MariaDB, a few
statements in one short transaction (``db.limited_steps``: SQLite's write lock, taken at
BEGIN, stands for the rows' locks), with nothing but those statements run while the locks
are held. The batch serves claims inside a transaction of the caller's and while the
one-trip claim rests. Jobs of the other limits (near their end, per-key,
paused keys) are left to the careful claim when it comes back short; once only those hold
jobs, claims go the careful way alone for a while (``_one_trip_resumes``).

Either way, under the locks every claim that held them before has committed, so the counts
are exact (SQLite's write lock, taken at BEGIN, serializes every claim anyway), and no limit
is ever exceeded. A job held back stays ready, with its attempts untouched, and is chosen by
a later claim once its limits allow: when a running job ends (the next claim, at a completion
or a poll) or a token comes (``LimitedClaim.retry_in`` says when).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import connections

from ..claimed import ClaimedJob
from ..db import queries_for
from ..db.base import HeldBack, LimitedAsk, LimitedCandidate, WholeLimit
from ..models import LimitState
from .buckets import seconds_until_token
from .declared import (
    ANY_KEY,
    QUEUE,
    TASK,
    Limit,
    Scope,
    declared_limits,
    limit_on,
    limits_of,
    scopes_of,
)
from .state import (
    Buckets,
    LimitsRead,
    Use,
    create_missing_rows,
    locked_states,
    read_limits,
    scope_of,
    take_tokens,
)

#: Candidates a careful claim reads per job asked for: room to pass over jobs whose limits
#: fill up during the choice, beyond those already held back in the query.
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

    def add(self, other: LimitedClaim) -> None:
        """Add what a later claim of the same round did."""
        self.jobs += other.jobs
        self.held_back = self.held_back or other.held_back
        if other.retry_in is not None:
            self.wait_at_most(other.retry_in)


class _Overdrawn(Exception):
    """A batch, counted under its limits' locks, went past one of them."""


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
    ask = LimitedAsk(worker_id, queues, count, lease_seconds, paused_retries, excluded_queues)
    connection = connections[using]
    queries = queries_for(connection)
    if (
        queries.supports_limited_claim_in_one_trip
        and not connection.in_atomic_block
        and time.monotonic() >= _one_trip_resumes.get(using, 0.0)
    ):
        return _claim_in_one_trip(using, ask)
    claim = LimitedClaim()
    try:
        # Keep this transaction short: it ends holding the limits' rows (on SQLite, the
        # write lock throughout).
        with queries.write_transaction(connection):
            left_for_careful = _claim_batch(using, ask, claim)
    except _Overdrawn:
        # Rolled back: other claims took the room this one counted on.
        claim, left_for_careful = LimitedClaim(), True
    if left_for_careful and len(claim.jobs) < count:
        claim.add(_claim_carefully(using, dataclasses.replace(ask, count=count - len(claim.jobs))))
    return claim


def _claim_in_one_trip(using: str, ask: LimitedAsk) -> LimitedClaim:
    """Claim in one trip the jobs of limits with room to spare; the others' carefully,
    if that claim came back short."""
    connection = connections[using]
    queries = queries_for(connection)
    wholes, keyed = _wholes_and_keyed()
    # Rows missing from the database count as limits without room: the careful claim then
    # creates them.
    create_missing_rows(using, {Scope(limit.kind, limit.name) for limit in wholes})
    claimed, short = queries.claim_limited_in_one_trip(connection, ask, keyed, wholes)
    claim = LimitedClaim(jobs=[job for job, _ in claimed])
    if (short or keyed != HeldBack()) and len(claim.jobs) < ask.count:
        rest = dataclasses.replace(ask, count=ask.count - len(claim.jobs))
        careful = _claim_carefully(using, rest)
        if not claim.jobs and (careful.jobs or careful.held_back):
            # The jobs waiting are those of limits near their end (a cap or a rate at work,
            # claimed at every completion) or per-key ones: claim them the careful way alone
            # for a while, without this claim's locks and its look past their jobs before it;
            # twice as long each time this claim finds nothing again.
            pause = min(ONE_TRIP_PAUSE_MAX_SECONDS, 2 * _one_trip_pauses.get(using, 0.5))
            _one_trip_pauses[using] = pause
            _one_trip_resumes[using] = time.monotonic() + pause
            claim.add(careful)
            return claim
        claim.add(careful)
    if claim.jobs:
        _one_trip_pauses.pop(using, None)
    return claim


#: By database alias, when limited claims try the one-trip claim again (``time.monotonic``)
#: after one found nothing where the careful claim then found jobs, or held some back; and
#: how long that pause was (it doubles, from a second up to ONE_TRIP_PAUSE_MAX_SECONDS, while
#: one-trip claims find nothing, and ends once a claim finds limits with room again).
_one_trip_resumes: dict[str, float] = {}
_one_trip_pauses: dict[str, float] = {}
ONE_TRIP_PAUSE_MAX_SECONDS = 16.0


def _one_trip_room_again(using: str) -> None:
    """A batch left every limit with room: the one-trip claim may take the next ones."""
    _one_trip_resumes.pop(using, None)
    _one_trip_pauses.pop(using, None)


def _wholes_and_keyed() -> tuple[list[WholeLimit], HeldBack]:
    """The whole tasks' and queues' limits, for the one-trip claim to check; and the tasks and
    queues with per-key limits, whose jobs it leaves to the careful claim (it skips keys
    another claim is choosing)."""
    wholes: list[WholeLimit] = []
    keyed: dict[str, set[str]] = {TASK: set(), QUEUE: set()}
    for limit in declared_limits():
        scope = limit.scope
        if scope.key == ANY_KEY:
            keyed[scope.kind].add(scope.name)
            continue
        rate = limit.rate
        wholes.append(
            WholeLimit(
                scope.kind,
                scope.name,
                limit.cap,
                rate.per_second if rate else None,
                float(rate.burst) if rate else None,
            )
        )
    return wholes, HeldBack(tasks=frozenset(keyed[TASK]), queues=frozenset(keyed[QUEUE]))


def _claim_batch(using: str, ask: LimitedAsk, claim: LimitedClaim) -> bool:
    """Claim a batch into ``claim`` within the limits with room for all of it (raise
    ``_Overdrawn`` if concurrent claims took that room); return whether limits with less
    room held jobs back from it."""
    connection = connections[using]
    queries = queries_for(connection)
    first: LimitsRead | None = None
    known_count, known_short = _room_known.pop(using, (0, HeldBack()))
    if known_count >= ask.count:
        # The last batch left no limit used up, and these with room for less than a batch
        # this large: nothing else to hold back but what its check, under the locks, would
        # find (it then rolls back).
        held_back, short = HeldBack(), known_short
    else:
        # The whole tasks' and queues' rows too, not only those short of a token: a rate
        # near its end is left to the careful claim.
        first = read_limits(using, short_of=ask.count)
        buckets = Buckets(first.rows, first.now)
        held_back = _held_back(first.use, buckets, claim)
        short = _short_of_room(ask.count, first.use, buckets)
    claimed = queries.claim_limited_batch(connection, ask, held_back | short)
    if claimed:
        jobs = [job for job, _ in claimed]
        limits = _limits_by_job((job.id, job.task_name, job.queue, key) for job, key in claimed)
        counted = {limit.scope for found in limits.values() for limit in found}
        if queries.one_writer:
            # This transaction holds the only write lock, since its BEGIN: the first read is
            # exact, or one read now counts this claim's jobs too, and its rows of whole tasks
            # and queues are as locked as they will be.
            if first is not None:
                again, counted_own = first, False
            else:
                again, counted_own = read_limits(using, short_of=ask.count), True
            read_rows = {scope_of(row): row for row in again.rows}
            if counted <= read_rows.keys():
                locked = [read_rows[scope] for scope in sorted(counted)]
            else:
                locked = locked_states(using, counted, skip_keyed=False)
        else:
            # Waiting for keys' rows too: this claim's jobs are chosen already, and every
            # claim locks in one order.
            locked = locked_states(using, counted, skip_keyed=False) if counted else []
            # Under the locks: every claim that held them has committed, and this claim's own
            # jobs count as running.
            again, counted_own = read_limits(using, short_of=ask.count), True
        buckets = Buckets([*(first.rows if first else []), *again.rows, *locked], again.now)
        _check(claimed, limits, again.use, buckets, locked, counted_own)
        claim.jobs = jobs
        take_tokens(using, jobs, limits, buckets)
        if not counted_own:
            again.use.add(claimed)
        if _held_back(again.use, buckets, LimitedClaim()) == HeldBack():
            _room_known[using] = (ask.count, _short_of_room(ask.count, again.use, buckets))
            _one_trip_room_again(using)
    elif short != HeldBack():
        # Nothing locked yet: the careful claim goes on in this transaction, on its read.
        _claim_each(using, ask, claim, first or read_limits(using))
        return False
    return short != HeldBack()


#: By database alias, what the last batch's check found once its jobs ran and its tokens
#: were taken, where no limit was used up: the size of that batch, and the limits with room
#: for less. The next batch then need not read the limits before it claims.
_room_known: dict[str, tuple[int, HeldBack]] = {}


def _limits_by_job(jobs: Iterable[tuple[int, str, str, str]]) -> dict[int, list[Limit]]:
    """Each of ``jobs`` (id, task name, queue, limit key) with the limits it is under: looked
    up once for each task, queue and key (a claim's jobs share a few)."""
    found: dict[tuple[str, str, str], list[Limit]] = {}
    limits: dict[int, list[Limit]] = {}
    for job_id, task_name, queue, key in jobs:
        group = (task_name, queue, key)
        if group not in found:
            found[group] = limits_of(task_name, queue, key)
        limits[job_id] = found[group]
    return limits


def _short_of_room(count: int, use: Use, buckets: Buckets) -> HeldBack:
    """The declared limits that a batch of ``count`` would bring near their end: with room
    for some jobs, but not for the batch with half the cap or half the bucket to spare; and
    every per-key limit. The careful claim takes their jobs: it starts jobs under the limits'
    locks (the timing a rate at work needs), and skips keys another claim is choosing."""
    wholes: dict[str, set[str]] = {TASK: set(), QUEUE: set()}
    for limit in declared_limits():
        scope = limit.scope
        running = use[scope]
        near_end = _room(limit, running, buckets) > 0 and _spare(limit, running, buckets) < count
        if scope.key == ANY_KEY or near_end:
            wholes[scope.kind].add(scope.name)
    return HeldBack(tasks=frozenset(wholes[TASK]), queues=frozenset(wholes[QUEUE]))


def _room(limit: Limit, running: int, buckets: Buckets) -> float:
    """How many more jobs ``limit`` lets start now."""
    room = float("inf")
    if limit.cap is not None:
        room = limit.cap - running
    if limit.rate is not None:
        room = min(room, buckets.tokens(limit))
    return room


def _spare(limit: Limit, running: int, buckets: Buckets) -> float:
    """How many more jobs ``limit`` lets start now with half its cap and bucket left."""
    spare = float("inf")
    if limit.cap is not None:
        spare = limit.cap / 2 - running
    if limit.rate is not None:
        spare = min(spare, buckets.tokens(limit) - limit.rate.burst / 2)
    return spare


def _check(
    claimed: Sequence[tuple[ClaimedJob, str]],
    limits: dict[int, list[Limit]],
    use: Use,
    buckets: Buckets,
    locked: Sequence[LimitState],
    counted_own: bool,
) -> None:
    """Raise ``_Overdrawn`` unless the ``claimed`` jobs fit in their limits: no pause, the
    jobs running within each cap (counting these, unless ``use`` does: ``counted_own``), a
    token for each in each bucket."""
    locked_scopes = {scope_of(row) for row in locked}
    taken: Counter[Scope] = Counter()
    by_scope: dict[Scope, Limit] = {}
    groups = Counter((job.task_name, job.queue, key) for job, key in claimed)
    for task_name, queue, key in groups:
        if any(buckets.paused_for(scope) for scope in scopes_of(task_name, queue, key)):
            raise _Overdrawn
    for job, _key in claimed:
        for limit in limits[job.id]:
            taken[limit.scope] += 1
            by_scope[limit.scope] = limit
    for scope, jobs in taken.items():
        limit = by_scope[scope]
        if scope not in locked_scopes:
            # Its row is another claim's, just created and not yet committed.
            raise _Overdrawn
        if limit.cap is not None and use[scope] + (0 if counted_own else jobs) > limit.cap:
            raise _Overdrawn
        if limit.rate is not None and buckets.tokens(limit) < jobs:
            raise _Overdrawn


def _claim_carefully(using: str, ask: LimitedAsk) -> LimitedClaim:
    """Claim, one job at a time under the locks of their limits, what every limit allows."""
    connection = connections[using]
    queries = queries_for(connection)
    claim = LimitedClaim()
    # Keep this transaction short: it holds the limits' rows (on SQLite, the write lock).
    with queries.write_transaction(connection):
        _claim_each(using, ask, claim, read_limits(using))
    return claim


def _claim_each(using: str, ask: LimitedAsk, claim: LimitedClaim, first: LimitsRead) -> None:
    """The careful claim's steps, in the caller's transaction, after its ``first`` read."""
    connection = connections[using]
    queries = queries_for(connection)
    held_back = _held_back(first.use, Buckets(first.rows, first.now), claim)
    window = max(WINDOW_MIN, WINDOW_PER_JOB * ask.count)
    candidates = queries.limited_candidates(
        connection, ask.queues, ask.paused_retries, held_back, window, ask.excluded_queues
    )
    if not candidates:
        return
    limits = _limits_by_job((c.id, c.task_name, c.queue, c.limit_key) for c in candidates)
    counted = {limit.scope for found in limits.values() for limit in found}
    locked = locked_states(using, counted) if counted else []
    # Under the locks, the counts include every claim that held them before (where this
    # transaction holds the only write lock, they did already), and the clock is not
    # behind their refills. Tokens come from the locked rows alone.
    again = first if queries.one_writer else read_limits(using)
    buckets = Buckets([*first.rows, *again.rows, *locked], again.now)
    locked_scopes = {scope_of(row) for row in locked}
    chosen = _choose(candidates, limits, again.use, buckets, locked_scopes, ask.count, claim)
    if not chosen:
        return
    jobs = queries.claim_chosen(
        connection, ask.worker_id, [c.id for c in chosen], ask.lease_seconds
    )
    claim.jobs += jobs
    take_tokens(using, jobs, limits, buckets)


def _held_back(use: Use, buckets: Buckets, claim: LimitedClaim) -> HeldBack:
    """What the claims' queries leave out: scopes at their cap, paused or out of tokens."""
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


def _choose(
    candidates: Sequence[LimitedCandidate],
    limits: dict[int, list[Limit]],
    use: Use,
    buckets: Buckets,
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
