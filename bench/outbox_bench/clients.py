"""Enqueueing clients in processes of their own, as a site's web workers are.

Threads of one process would measure the interpreter lock more than the queue. This module
imports no models: a spawned client imports it before ``django.setup()``.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.synchronize import Barrier
from typing import Any

#: Operations each client runs before the timed ones (connections, caches).
WARM_UP = 20


def _client(kind: str, first: int, count: int, start: Barrier, finished: Any) -> None:
    import django

    django.setup()
    # After django.setup(): the writes import the models.
    from .writes import write_one

    operation = write_one(kind)
    for number in range(first - WARM_UP, first):
        operation(number)
    start.wait()
    for number in range(first, first + count):
        operation(number)
    finished.put(time.monotonic())


def rate_in_processes(kind: str, count: int, clients: int) -> float:
    """Run ``count`` writes of ``kind`` over ``clients`` processes; return writes per second."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(clients + 1)
    finished = context.Queue()
    share = max(1, count // clients)
    # Distinct payload numbers per client, for telling their jobs apart when debugging.
    processes = [
        context.Process(
            target=_client, args=(kind, (index + 1) * 1_000_000, share, start, finished)
        )
        for index in range(clients)
    ]
    for process in processes:
        process.start()
    try:
        start.wait(timeout=120)
        started = time.monotonic()
        ends: list[float] = [finished.get(timeout=600) for _ in processes]
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    return share * clients / (max(ends) - started)
