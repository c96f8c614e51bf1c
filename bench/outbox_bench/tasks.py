"""The benchmark's tasks, in their own queue: registered wherever the bench app is installed
(django-outbox imports every app's ``tasks`` module), and run only by the workers the bench
starts for that queue."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from django_outbox.claimed import current_job
from django_outbox.conf import get_settings
from django_outbox.tasks import task

from .tables import effect_model

QUEUE = "outbox-bench"
#: Where ``mark_start`` reports when it started: a UDP port on this host, set by the bench.
START_PORT_VARIABLE = "OUTBOX_BENCH_START_PORT"

_reporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


@task(name="outbox_bench.noop", queue=QUEUE, atomic=False, max_attempts=1)
def noop(payload: Any) -> None:
    """Nothing: what is measured is the queue's own cost per job."""


@task(name="outbox_bench.noop_atomic", queue=QUEUE, atomic=True, max_attempts=1)
def noop_atomic(payload: Any) -> None:
    """Nothing, in a transaction that commits with the job's success (one commit per job)."""


@task(name="outbox_bench.write_atomic", queue=QUEUE, atomic=True, max_attempts=1)
def write_atomic(payload: Any) -> None:
    """One small INSERT that commits with the job's success, as users' atomic jobs write."""
    effect_model()._default_manager.using(get_settings().database).create(job_id=current_job().id)


@task(name="outbox_bench.paced", queue=QUEUE, atomic=False, max_attempts=1)
def paced(payload: Any) -> None:
    """A handler of 5 ms: long enough that a backlog is still running when the bench adds to it."""
    time.sleep(0.005)


@task(name="outbox_bench.mark_start", queue=QUEUE, atomic=False, max_attempts=1)
def mark_start(payload: dict[str, int]) -> None:
    """Tell the bench when this handler started (the system-wide monotonic clock)."""
    started = time.monotonic()
    port = int(os.environ[START_PORT_VARIABLE])
    _reporter.sendto(f"{payload['n']} {started!r}".encode(), ("127.0.0.1", port))


# bench/limits.py: tasks under limits, each noting its runs in the file the bench names.
SPANS_VARIABLE = "OUTBOX_BENCH_SPANS"


def _note(event: str) -> None:
    # One short line per write, appended: lines of concurrent processes never interleave.
    with open(os.environ[SPANS_VARIABLE], "a") as spans:
        spans.write(f"{event} {os.getpid()} {current_job().id} {time.time():.6f}\n")


@task(name="outbox_bench.capped", queue=QUEUE, atomic=False, max_attempts=100, concurrency=3)
def capped(payload: dict[str, float]) -> None:
    """At most 3 at once across every worker: note the start and end of each run."""
    _note("start")
    time.sleep(payload["seconds"])
    _note("end")


@task(name="outbox_bench.rated", queue=QUEUE, atomic=False, max_attempts=1, rate_limit="10/200ms")
def rated(payload: Any) -> None:
    """At most 50 starts a second, in bursts of at most 10: note each start."""
    _note("start")


@task(
    name="outbox_bench.tenant_paced",
    queue=QUEUE,
    atomic=False,
    max_attempts=1,
    concurrency_per_key=2,
)
def tenant_paced(payload: Any) -> None:
    """``paced`` with at most 2 of each tenant's jobs at once."""
    time.sleep(0.005)


@task(
    name="outbox_bench.noop_limited",
    queue=QUEUE,
    atomic=False,
    max_attempts=1,
    concurrency=100_000,
    rate_limit="1000000/s",
)
def noop_limited(payload: Any) -> None:
    """``noop`` under a cap and a rate it never reaches: the limited claim's own cost."""
