"""Fault injection: workers SIGKILLed at random moments during a drain, and replaced."""

from __future__ import annotations

import itertools
import os
import random
import signal
import time

import pytest

from django_outbox.models import Job
from tests.chaos.outcomes import check_outcomes, report, scaled
from tests.processes import SHORT_LEASE, child_pids, wait_until
from tests.testapp import tasks

pytestmark = [pytest.mark.chaos, pytest.mark.process, pytest.mark.django_db(transaction=True)]

PLAIN = ("--concurrency", "4", "--prefetch", "10")
SUPERVISED = ("--processes", "2", "--concurrency", "2", "--prefetch", "10")


def test_repeated_sigkills_during_a_drain_lose_nothing_and_commit_atomic_writes_once(workers):
    jobs = scaled(3_000, 10_000)
    kills_wanted = scaled(10, 50)
    atomic: list[int] = []
    non_atomic: list[int] = []

    def enqueue(count: int) -> None:
        # Half of each kind unkeyed, half under fair keys: both claims run between the kills.
        payloads = [{"sleep": 0.03}] * (count // 4)
        for fair_key in (None, *(f"tenant-{key}" for key in range(4))):
            part = payloads if fair_key is None else payloads[: len(payloads) // 4]
            atomic.extend(
                job.pk for job in tasks.chaos_atomic.enqueue_many(part, fair_key=fair_key)
            )
            non_atomic.extend(
                job.pk for job in tasks.chaos_non_atomic.enqueue_many(part, fair_key=fair_key)
            )

    enqueue(jobs)
    # Fixed worker ids, as systemd units or StatefulSet pods have: a replacement must take
    # back what its predecessor of the same name held.
    roles = {
        "plain-1": ("--worker-id", "plain-1", *PLAIN),
        "plain-2": ("--worker-id", "plain-2", *PLAIN),
        "supervisor": ("--worker-id", "sup", *SUPERVISED),
    }
    running = {role: workers(*args, **SHORT_LEASE) for role, args in roles.items()}
    rng = random.Random(7)
    kills = {"plain": 0, "supervisor": 0, "child": 0}
    started = time.monotonic()
    # Every kind of victim, in a random order.
    kinds = ["plain-1", "plain-2", "supervisor", "child"] * 4
    rng.shuffle(kinds)
    victims = itertools.cycle(kinds)
    while sum(kills.values()) < kills_wanted:
        time.sleep(rng.uniform(0.1, 0.6))
        if not Job.objects.unfinished().exists():
            # Drained before every kill was made: keep them busy.
            enqueue(400)
        victim = next(victims)
        if victim == "child":
            children = list(child_pids(running["supervisor"]).values())
            if not children:
                continue
            # The supervisor restarts it.
            try:
                os.kill(rng.choice(children), signal.SIGKILL)
            except ProcessLookupError:
                continue
            kills["child"] += 1
            continue
        running[victim].kill()
        kills["supervisor" if victim == "supervisor" else "plain"] += 1
        running[victim] = workers(*roles[victim], **SHORT_LEASE)

    wait_until(
        lambda: not Job.objects.unfinished().exists(),
        timeout=scaled(120, 600),
        what="every job to finish after the kills",
    )
    drained_in = time.monotonic() - started
    for process in running.values():
        process.send(signal.SIGTERM)
    for process in running.values():
        assert process.wait(timeout=60) == 0, process.stderr

    figures = check_outcomes(atomic, non_atomic)
    report(
        "sigkills",
        jobs=len(atomic) + len(non_atomic),
        kills=sum(kills.values()),
        **{f"kills_{kind}": count for kind, count in kills.items()},
        lost=0,
        drained_in_s=round(drained_in, 1),
        **figures,
    )
