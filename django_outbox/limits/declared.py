"""Which limits apply to a job: its task's and its queue's, as declared now.

A limit is named by a ``Scope``: a task or a queue, and the key of a per-key limit ("" for
the whole task or queue). A job without a key is under the whole task's and queue's limits
alone: per-key limits count keyed jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..conf import get_settings
from ..tasks.registry import find_task, registered_tasks
from ..validation.limits import Rate, parse_rate

TASK = "task"
QUEUE = "queue"


@dataclass(frozen=True, order=True)
class Scope:
    """What one limit counts: the jobs of task or queue ``name`` (``kind``), of limit key
    ``key`` alone for a per-key limit ("" for all of them)."""

    kind: str
    name: str
    key: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}" + (f" key {self.key}" if self.key else "")


@dataclass(frozen=True)
class Limit:
    """A cap (jobs running at once) and a rate (starts per period) on one scope."""

    scope: Scope
    cap: int | None
    rate: Rate | None


def _declared(kind: str, name: str, key: str) -> Iterator[Limit]:
    if kind == TASK:
        task = find_task(name)
        if task is None:
            # Not run by this worker: its queue's limits still apply.
            return
        cap, rate = task.concurrency, task.rate_limit
        cap_key, rate_key = task.concurrency_per_key, task.rate_limit_per_key
    else:
        options = get_settings().queue_options(name)
        cap, rate = options.concurrency, options.rate_limit
        cap_key, rate_key = options.concurrency_per_key, options.rate_limit_per_key
    if cap is not None or rate is not None:
        yield Limit(Scope(kind, name), cap, parse_rate(rate) if rate else None)
    if key and (cap_key is not None or rate_key is not None):
        yield Limit(Scope(kind, name, key), cap_key, parse_rate(rate_key) if rate_key else None)


def limits_of(task_name: str, queue: str, limit_key: str) -> list[Limit]:
    """Return the limits a job of ``task_name`` in ``queue`` with ``limit_key`` is under."""
    return [*_declared(TASK, task_name, limit_key), *_declared(QUEUE, queue, limit_key)]


def limit_on(scope: Scope) -> Limit | None:
    """Return the limit declared on ``scope`` (a per-key one for a keyed scope), or None."""
    for limit in _declared(scope.kind, scope.name, scope.key):
        if limit.scope == scope:
            return limit
    return None


def scopes_of(task_name: str, queue: str, limit_key: str) -> list[Scope]:
    """Return every scope a job counts in, declared or not: a pause may name any of them."""
    scopes = [Scope(TASK, task_name), Scope(QUEUE, queue)]
    if limit_key:
        scopes += [Scope(TASK, task_name, limit_key), Scope(QUEUE, queue, limit_key)]
    return scopes


def declared_limits() -> list[Limit]:
    """Return the limits of whole tasks and queues, and, with key "*", the per-key limits:
    every registered task's and every queue's of ``OUTBOX["QUEUES"]``."""
    found: list[Limit] = []
    owners = [(TASK, task.name) for task in registered_tasks() if task.limited]
    owners += [(QUEUE, name) for name in sorted(get_settings().queues)]
    for kind, name in owners:
        found += _declared(kind, name, ANY_KEY)
    return found


#: The key ``declared_limits`` gives per-key limits: they apply to each key on its own.
ANY_KEY = "*"
