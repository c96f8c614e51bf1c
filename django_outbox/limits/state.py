"""What a limited claim reads and writes of its limits: the jobs running under each, and the
limits' rows (``LimitState``: pauses, buckets), read, locked, created and spent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connections
from django.db.models import Count, Q
from django.db.models.functions import Now

from ..claimed import ClaimedJob
from ..db import queries_for
from ..db.limited import limits_read_sql
from ..models import Job, JobStatus, LimitState
from .buckets import refilled
from .declared import Limit, Scope, scopes_of


class Use:
    """Each scope's jobs running now, from the running jobs' (task, queue, key) counts."""

    def __init__(self, groups: Counter[tuple[str, str, str | None]]) -> None:
        self.by_scope: Counter[Scope] = Counter()
        for (task_name, queue, key), running in groups.items():
            for scope in scopes_of(task_name, queue, key or ""):
                self.by_scope[scope] += running

    def __getitem__(self, scope: Scope) -> int:
        return self.by_scope[scope]

    def add(self, claimed: Iterable[tuple[ClaimedJob, str]]) -> None:
        """Count ``claimed`` jobs (each with its limit key) as running too."""
        for job, key in claimed:
            for scope in scopes_of(job.task_name, job.queue, key):
                self.by_scope[scope] += 1


def running_use(using: str) -> Use:
    rows = (
        Job.objects.using(using)
        # Along outbox_job_lease: running jobs are few, however many wait.
        .filter(status=JobStatus.RUNNING, lease_expires_at__gt=Now())
        .values_list("task_name", "queue", "limit_key")
        .annotate(running=Count("id"))
        .order_by()
    )
    return Use(Counter({(task, queue, key): running for task, queue, key, running in rows}))


def scope_of(row: LimitState) -> Scope:
    return Scope(row.kind, row.name, row.key)


class Buckets:
    """The limits' rows a claim read: pauses, and tokens refilled to ``now``. A scope without
    a row read has a full bucket (or, where only rows short of tokens were read, at least as
    many tokens as they were short of)."""

    def __init__(self, rows: Iterable[LimitState], now: float) -> None:
        self.now = now
        self.rows = {scope_of(row): row for row in rows}

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


@dataclass
class LimitsRead:
    """What ``read_limits`` read: the database's clock (seconds), the limits' rows that may
    hold jobs back, and the jobs running under each limit."""

    now: float
    rows: list[LimitState]
    use: Use


def read_limits(using: str, short_of: int = 1) -> LimitsRead:
    """Read the clock, the limits' rows of whole tasks and queues and those paused or with
    fewer than ``short_of`` tokens (as last written; refilled since, they may hold more), and
    the jobs running (whose lease has not expired), in one statement: a claim reads them once
    or twice, on its hot path."""
    connection = connections[using]
    queries = queries_for(connection)
    sql = limits_read_sql(
        queries.placeholder, queries.clock, queries.clock_seconds, connection.ops.quote_name
    )
    _, rows = queries.execute(connection, sql, [short_of])
    now = 0.0
    states: list[LimitState] = []
    groups: Counter[tuple[str, str, str | None]] = Counter()
    for what, number, first, second, third, *floats in rows:
        if what == "clock":
            now = float(floats[0])
        elif what == "limit":
            tokens, refilled_at, paused_until = (
                None if value is None else float(value) for value in floats
            )
            row = LimitState(
                id=number,
                kind=first,
                name=second,
                key=third,
                tokens=tokens,
                refilled_at=refilled_at,
                paused_until=paused_until,
            )
            row._state.adding = False
            row._state.db = using
            states.append(row)
        else:
            groups[(first, second, third)] += int(number)
    return LimitsRead(now, states, Use(groups))


def locked_states(using: str, scopes: set[Scope], *, skip_keyed: bool = True) -> list[LimitState]:
    """Lock the rows of ``scopes`` in one order (creating those missing) and return them.

    Rows another claim created and has not committed yet are not returned: their jobs wait
    for a later claim. With ``skip_keyed``, neither are keys' rows another claim holds.
    """
    ordered = sorted(scopes)
    known = _known_rows.setdefault(using, set())
    _create(using, [scope for scope in ordered if scope not in known])
    locked = _lock(using, ordered, skip_keyed)
    if len(locked) < len(ordered) and _missing(using, ordered, locked):
        # Rows deleted since this process created them (by hand, or a test's flush).
        _create(using, ordered)
        locked = _lock(using, ordered, skip_keyed)
    known.update(scope_of(row) for row in locked)
    return locked


def create_missing_rows(using: str, scopes: set[Scope]) -> None:
    """Create the rows of ``scopes`` this process has not seen yet (one statement the first
    time, none after): the one-trip claim locks rows, it does not create them."""
    known = _known_rows.setdefault(using, set())
    missing = sorted(scopes - known)
    if missing:
        _create(using, missing)
        known.update(missing)


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


def _lock(using: str, ordered: list[Scope], skip_keyed: bool) -> list[LimitState]:
    """Lock the rows of ``ordered``: a whole task's or queue's waiting for other claims (every
    candidate of it needs the row), a key's skipping those another claim holds with
    ``skip_keyed`` (it is choosing that key's jobs now; this one takes other keys' meanwhile,
    on databases that can skip).

    Every claim locks the wholes' rows, then the keys', each in the scopes' order, so that no
    two claims wait for each other."""
    locked: list[LimitState] = []
    for keyed in (False, True):
        matching = Q()
        for scope in ordered:
            if bool(scope.key) == keyed:
                matching |= Q(kind=scope.kind, name=scope.name, key=scope.key)
        if matching:
            locked += (
                LimitState.objects.using(using)
                .select_for_update(skip_locked=keyed and skip_keyed)
                .filter(matching)
                .order_by("kind", "name", "key")
            )
    return locked


#: The limits' rows known to exist, by database alias: a claim creates only the others (in
#: steady state, one statement locks the rows). The outbox never deletes them.
_known_rows: dict[str, set[Scope]] = {}


def take_tokens(
    using: str,
    claimed: Sequence[ClaimedJob],
    limits: dict[int, list[Limit]],
    buckets: Buckets,
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
