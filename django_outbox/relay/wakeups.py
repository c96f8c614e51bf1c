"""Waking this process's relays when a message commits, where no NOTIFY reports it (SQLite)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections, transaction

from ..db import queries_for

_subscribers: list[Callable[[], None]] = []
_lock = threading.Lock()


def subscribe(callback: Callable[[], None]) -> None:
    with _lock:
        _subscribers.append(callback)


def unsubscribe(callback: Callable[[], None]) -> None:
    with _lock:
        if callback in _subscribers:
            _subscribers.remove(callback)


def _wake() -> None:
    with _lock:
        subscribers = list(_subscribers)
    for callback in subscribers:
        callback()


def messages_published(using: str) -> None:
    """Wake this process's relays once the publishing transaction on ``using`` commits."""
    # A web process runs no relay: one truth test. PostgreSQL's trigger wakes every relay.
    if not _subscribers or queries_for(connections[using]).listens:
        return
    if connections[using].in_atomic_block:
        # A hint only: the message itself was written in the caller's transaction.
        transaction.on_commit(_wake, using=using)
    else:
        _wake()
