"""The relay bench's processes: the latency's publishers (``relay.latency`` spawns them), and
relays of their own (``relay.relay_processes_rate``).

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


def relay_until_stopped(name: str, batch: int, stop: Any, ready: Any) -> None:
    """Run a relay of broker ``name`` in this process until ``stop`` is set; set ``ready``
    once it runs, connected to the broker."""
    import django

    django.setup()
    from django.test import override_settings

    from django_outbox.relay.brokers import broker_named
    from django_outbox.relay.loop import Relay

    from .relay import BROKERS, _envelopes, _settings

    with override_settings(OUTBOX=_settings(name, batch=batch)):
        relay = Relay(housekeeping=False)

        def connected_then_run() -> None:
            # The relay's adapter is its thread's: connected here, in that thread, by one
            # message of its own (a relay connects once in its life, not per backlog).
            broker_named("default").publish(_envelopes(BROKERS[name][2], 1, None))
            ready.set()
            relay.run()

        thread = threading.Thread(target=connected_then_run, daemon=True)
        thread.start()
        stop.wait()
        relay.request_stop()
        thread.join(30)
