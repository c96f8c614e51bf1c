"""Waking idle workers of this process when a job is enqueued, without waiting for their poll.

On PostgreSQL a trigger NOTIFYs every worker on every host (``DatabaseQueries.listen``); this
module covers the enqueues that no NOTIFY reports: on SQLite, a worker thread in the enqueueing
process (the demo, tests, a job that enqueues another) is woken directly once the job commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from functools import partial

from django.db import connections, transaction

from ..db import queries_for

#: Callbacks of this process's running workers, called with the queue of each committed enqueue.
_subscribers: list[Callable[[str], None]] = []
_lock = threading.Lock()


def subscribe(callback: Callable[[str], None]) -> None:
    with _lock:
        _subscribers.append(callback)


def unsubscribe(callback: Callable[[str], None]) -> None:
    with _lock:
        if callback in _subscribers:
            _subscribers.remove(callback)


def _wake(queues: Iterable[str]) -> None:
    with _lock:
        subscribers = list(_subscribers)
    for queue in set(queues):
        for callback in subscribers:
            callback(queue)


def jobs_enqueued(using: str, queues: Iterable[str]) -> None:
    """Wake this process's workers for ``queues`` once the enqueue on ``using`` commits."""
    # The common case, a web process with no worker, costs one truth test; where the database
    # announces every enqueue itself, the workers of this process hear it too.
    if not _subscribers or queries_for(connections[using]).listens:
        return
    queues = list(queues)
    if connections[using].in_atomic_block:
        # A wake-up hint only: the job itself was written in the caller's transaction.
        transaction.on_commit(partial(_wake, queues), using=using)
    else:
        _wake(queues)


def jobs_made_ready(using: str, queues: Iterable[str]) -> None:
    """Wake workers of ``queues`` in every process, once the caller's transaction commits, for
    jobs made ready by an update (resumed, retried) that no enqueue trigger announces."""
    queues = sorted(set(queues))
    if not queues:
        return
    connection = connections[using]
    queries_for(connection).announce(connection, queues)
    jobs_enqueued(using, queues)
