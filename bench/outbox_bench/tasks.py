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
