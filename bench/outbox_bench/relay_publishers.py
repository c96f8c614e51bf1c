"""The latency bench's publishers, in a process of their own (``relay.latency`` spawns it).

A module apart from ``relay``: a spawned process imports its target's module before it can set
Django up, and ``relay`` imports models.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def publish_steadily(
    name: str, rate: float, seconds: float, publishers: int, start_at: float, results: Any
) -> None:
    """Commit messages one per transaction at ``rate`` a second from ``start_at``
    (time.monotonic(), the same clock in every process) for ``seconds``, from ``publishers``
    threads; put each message's id and commit time in ``results``."""
    import django

    django.setup()
    from django.db import connections
    from django.test import override_settings

    from django_outbox import publish

    from .relay import BROKERS, _settings

    _backend, _options, topic = BROKERS[name]
    committed: list[tuple[str, float]] = []
    interval = publishers / rate

    def publisher(number: int) -> None:
        next_at = start_at + number * interval / publishers
        end = start_at + seconds
        sent = 0
        try:
            while next_at < end:
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                message = publish(topic, {"n": sent}, key=f"k{(sent * publishers + number) % 100}")
                committed.append((message.id.hex, time.monotonic()))
                sent += 1
                next_at += interval
        finally:
            connections.close_all()

    with override_settings(OUTBOX=_settings(name)):
        threads = [threading.Thread(target=publisher, args=(n,)) for n in range(publishers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    results.put(committed)
