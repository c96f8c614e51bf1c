"""Each limit's use now, for ``outbox_stats`` and the dashboard: jobs running against its cap,
tokens left in its bucket, a pause, and the jobs waiting on it."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from django.db import connections
from django.db.models import Count
from django.db.models.functions import Now

from ..conf import get_settings
from ..db import queries_for
from ..models import CLAIMABLE, Job, LimitState
from .buckets import refilled
from .declared import Limit, Scope, declared_limits, limit_on, scopes_of
from .state import running_use

#: The most keys of one per-key limit listed (those with the most jobs running and waiting).
KEYS_LISTED = 20


@dataclass(frozen=True)
class LimitUse:
    """One limit (of a whole task or queue, or of one key) and its use now."""

    kind: str
    name: str
    key: str
    concurrency: int | None
    running: int
    rate_limit: str | None
    tokens: float | None
    paused_seconds: float
    #: Due jobs under this limit that no worker has claimed: held back, or not yet claimed.
    waiting: int

    @property
    def at_cap(self) -> bool:
        return self.concurrency is not None and self.running >= self.concurrency

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _waiting(using: str) -> Counter[Scope]:
    rows = (
        Job.objects.using(using)
        .filter(status__in=CLAIMABLE, limit_key__isnull=False, run_at__lte=Now())
        .values_list("task_name", "queue", "limit_key")
        .annotate(waiting=Count("id"))
        .order_by()
    )
    by_scope: Counter[Scope] = Counter()
    for task_name, queue, key, waiting in rows:
        for scope in scopes_of(task_name, queue, key or ""):
            by_scope[scope] += waiting
    return by_scope


def limit_usage(*, using: str | None = None) -> list[LimitUse]:
    """Return the use of every declared limit, and of the busiest keys of per-key ones, and
    of every paused scope."""
    using = using or get_settings().database
    connection = connections[using]
    now = queries_for(connection).database_seconds(connection)
    running = running_use(using).by_scope
    waiting = _waiting(using)
    states = {
        Scope(row.kind, row.name, row.key): row for row in LimitState.objects.using(using).all()
    }
    scopes: list[tuple[Scope, Limit | None]] = []
    for declared in declared_limits():
        if declared.scope.key == "*":
            keys = Counter(
                {
                    scope: running[scope] + waiting[scope]
                    for scope in {*running, *waiting}
                    if scope.kind == declared.scope.kind
                    and scope.name == declared.scope.name
                    and scope.key
                }
            )
            scopes += [(scope, limit_on(scope)) for scope, _ in keys.most_common(KEYS_LISTED)]
        else:
            scopes.append((declared.scope, declared))
    listed = {scope for scope, _ in scopes}
    for scope, paused_row in sorted(states.items()):
        pause_until = paused_row.paused_until
        if scope not in listed and pause_until is not None and pause_until > now:
            scopes.append((scope, limit_on(scope)))
    found = []
    for scope, limit in scopes:
        row = states.get(scope)
        tokens = None
        if limit is not None and limit.rate is not None:
            tokens = refilled(
                limit.rate, *((row.tokens, row.refilled_at) if row else (None, None)), now
            )
        paused = 0.0
        if row is not None and row.paused_until is not None:
            paused = max(0.0, row.paused_until - now)
        found.append(
            LimitUse(
                kind=scope.kind,
                name=scope.name,
                key=scope.key,
                concurrency=limit.cap if limit else None,
                running=running[scope],
                rate_limit=str(limit.rate) if limit and limit.rate else None,
                tokens=tokens,
                paused_seconds=paused,
                waiting=waiting[scope],
            )
        )
    return found
