"""Enqueueing clients in processes of their own, as a site's web workers are.

Threads of one process would measure the interpreter lock more than the queue. This module
imports no models: a spawned client imports it before ``django.setup()``.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from types import TracebackType
from typing import Any

#: Operations each client runs of a kind before its first timed block (connections, caches).
WARM_UP = 20

#: A block of writes a client is asked for: the kind and how many; None ends the client.
Order = tuple[str, int] | None


def _client(first: int, orders: Queue[Order], start: Barrier, finished: Any) -> None:
    import django

    django.setup()
    # After django.setup(): the writes import the models.
    from .writes import write_one

    operations = {}
    number = first
    while (order := orders.get()) is not None:
        kind, count = order
        if kind not in operations:
            operations[kind] = write_one(kind)
            for _ in range(WARM_UP):
                operations[kind](number)
                number += 1
        operation = operations[kind]
        start.wait()
        for _ in range(count):
            operation(number)
            number += 1
        finished.put(time.monotonic())


class Clients:
    """``count`` client processes, started once for many timed blocks of writes.

    A process takes seconds to start and set Django up: starting them once, not once a block,
    keeps a run of the bench (and its test) from spending most of its time on start-ups.
    """

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._start = context.Barrier(count + 1)
        self._finished = context.Queue()
        self._orders: list[Queue[Order]] = [context.Queue() for _ in range(count)]
        # Distinct payload numbers per client, for telling their jobs apart when debugging.
        self._processes = [
            context.Process(
                target=_client, args=((index + 1) * 1_000_000, orders, self._start, self._finished)
            )
            for index, orders in enumerate(self._orders)
        ]

    def __enter__(self) -> Clients:
        for process in self._processes:
            process.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for orders in self._orders:
            orders.put(None)
        for process in self._processes:
            process.join(30)
            if process.is_alive():
                process.kill()

    def rate(self, kind: str, count: int) -> float:
        """Run ``count`` writes of ``kind`` over the clients; return writes per second."""
        share = max(1, count // len(self._processes))
        for orders in self._orders:
            orders.put((kind, share))
        self._start.wait(timeout=120)
        started = time.monotonic()
        ends: list[float] = [self._finished.get(timeout=600) for _ in self._processes]
        return share * len(self._processes) / (max(ends) - started)
