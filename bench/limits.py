"""Concurrency caps and rate limits measured: the four figures of docs/performance.md.

Run from ``example_project/``, as ``make bench`` runs ``outbox_bench`` (the database must exist)::

    DEBUG=false DATABASE_URL=postgres://postgres@127.0.0.1:5432/outbox_bench PYTHONPATH=../bench \
        DJANGO_SETTINGS_MODULE=outbox_bench.settings ../.venv/bin/python ../bench/limits.py \
        [cap|rate|tenants|drain ...]

- ``cap``: 4 processes x 8 threads run 50 ms jobs of a task capped at 3 (``--seconds`` of work
  at the cap); the handlers note each run's start and end; the most running at once, sampled
  every 10 ms and exactly (a sweep of the starts and ends). ``kills``: the same with 20
  SIGKILLs of worker processes spread over the run (a killed handler's run ends at its kill;
  the supervisor starts the process again; leases of 2 s).
- ``rate``: 3,000 jobs of a task limited to ``10/200ms`` (50 starts/s, bursts of 10) run by 4 x 8
  workers; starts per 10 s window, and the largest excess over the rate in any stretch of time
  (starts - 50/s x its length), which the bucket bounds at 10.
- ``tenants``: 99 tenants of 20 jobs of 5 ms each, fair and capped at 2 per tenant, alone and
  beside a tenant of 10,000 such jobs; how long the 99 tenants' jobs take (first start to their
  last end), alternated.
- ``drain``: 20,000 no-op jobs, without limits and under a cap and a rate never reached,
  alternated, 2 processes x 8 threads, ``--prefetch 100``; medians of jobs/s.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path


def setup() -> None:
    # The example project (the current directory) and the bench app.
    sys.path[:0] = [os.getcwd(), str(Path(__file__).resolve().parent)]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def read_spans(path: Path, kills: dict[int, list[float]]) -> list[tuple[float, float]]:
    """Each run's (start, end); a run without an end ended when its process was killed."""
    started: dict[tuple[int, int], float] = {}
    runs = []
    for line in path.read_text().splitlines():
        event, pid, job, at = line.split()
        key = (int(pid), int(job))
        if event == "start":
            started[key] = float(at)
        else:
            runs.append((started.pop(key), float(at)))
    for (process, _job), start in started.items():
        ends = [killed for killed in kills.get(process, []) if killed >= start]
        if not ends:
            raise RuntimeError(f"a run of process {process} has no end and it was not killed")
        runs.append((start, min(ends)))
    return runs


def most_at_once(runs: list[tuple[float, float]]) -> tuple[int, int]:
    """The most runs at once: sampled every 10 ms, and exactly (a sweep)."""
    events = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    exact = at_once = 0
    for _, change in events:
        at_once += change
        exact = max(exact, at_once)
    first, last = min(s for s, _ in runs), max(e for _, e in runs)
    sampled = 0
    moment = first
    while moment <= last:
        sampled = max(sampled, sum(1 for s, e in runs if s <= moment < e))
        moment += 0.01
    return sampled, exact


def bench_cap(seconds: float, kills: int) -> None:
    from outbox_bench import measure
    from outbox_bench import tasks as bench_tasks

    with tempfile.TemporaryDirectory() as directory:
        spans = Path(directory) / "spans"
        environ = {bench_tasks.SPANS_VARIABLE: str(spans), "OUTBOX_BENCH_LEASE_SECONDS": "2"}
        os.environ.update(environ)
        with measure.running_workers(4, 8, 0, environ) as workers:
            spans.write_text("")
            count = int(seconds * 3 / 0.05)
            bench_tasks.capped.enqueue_many([{"seconds": 0.05}] * count)
            killed: dict[int, list[float]] = {}
            started = time.monotonic()
            for number in range(kills):
                time.sleep(
                    max(0.0, started + (number + 1) * seconds / (kills + 1) - time.monotonic())
                )
                # A process killed just before may not have been started again yet.
                while not (pids := list(workers.supervisor.pids)):
                    time.sleep(0.1)
                pid = random.choice(pids)
                killed.setdefault(pid, []).append(time.time())
                os.kill(pid, signal.SIGKILL)
            measure.wait_until_finished(time.monotonic() + seconds * 10 + 120)
            runs = read_spans(spans, killed)
        sampled, exact = most_at_once(runs)
        took = max(e for _, e in runs) - min(s for s, _ in runs)
        print(
            f"cap 3, 4 x 8 threads, {kills} SIGKILLs: {len(runs)} runs of {count} jobs in "
            f"{took:.1f} s; most at once: {sampled} sampled every 10 ms, {exact} exactly"
        )


def bench_rate(count: int, processes: int) -> None:
    from outbox_bench import measure
    from outbox_bench import tasks as bench_tasks

    with tempfile.TemporaryDirectory() as directory:
        spans = Path(directory) / "spans"
        environ = {bench_tasks.SPANS_VARIABLE: str(spans)}
        os.environ.update(environ)
        with measure.running_workers(processes, 8, 0, environ):
            spans.write_text("")
            bench_tasks.rated.enqueue_many([{}] * count)
            measure.wait_until_finished(time.monotonic() + count / 50 * 2 + 120)
            starts = sorted(float(line.split()[3]) for line in spans.read_text().splitlines())
            # The claims' own times, by the database's clock: what the bucket rules.
            claims = sorted(
                started.timestamp()
                for started in measure.bench_jobs().values_list("started_at", flat=True)
                if started is not None
            )
    first = starts[0]
    windows: dict[int, int] = {}
    for start in starts:
        windows[int((start - first) // 10)] = windows.get(int((start - first) // 10), 0) + 1
    full = [windows[w] / 10 for w in sorted(windows) if (w + 1) * 10 <= starts[-1] - first]
    print(
        f"rate 10/200ms (50/s), {processes} x 8 threads, {count} jobs: starts/s per full 10 s "
        f"window: {', '.join(f'{rate:.1f}' for rate in full)}; worst window "
        f"{max(abs(rate - 50) for rate in full) / 50 * 100:.1f}% from 50/s; largest excess "
        f"over the rate in any stretch: {excess_over(starts, 50):.2f} handler starts, "
        f"{excess_over(claims, 50):.2f} claims (bucket 10)"
    )


def excess_over(times: list[float], rate: float) -> float:
    """The largest excess over ``rate`` in any stretch [times[i], times[j]] (events minus
    rate x its length): at most the bucket's size, by the token bucket's promise."""
    excess = 0.0
    lowest = float("inf")
    for j, at in enumerate(times):
        lowest = min(lowest, j - rate * at)
        excess = max(excess, j + 1 - rate * at - lowest)
    return excess


def bench_tenants(rounds: int) -> None:
    from django.db import transaction
    from django.db.models import Max, Min
    from outbox_bench import measure
    from outbox_bench import tasks as bench_tasks
    from outbox_bench.tasks import QUEUE
    from outbox_bench.writes import using

    jobs = measure.bench_jobs()
    taken: dict[bool, list[float]] = {False: [], True: []}
    with measure.running_workers(4, 8, 0):
        for _ in range(rounds):
            for big in (False, True):
                measure.delete_jobs_of(QUEUE)
                with transaction.atomic(using=using()):
                    if big:
                        bench_tasks.tenant_paced.enqueue_many([{}] * 10_000, fair_key="big")
                    for tenant in range(99):
                        bench_tasks.tenant_paced.enqueue_many([{}] * 20, fair_key=f"t{tenant}")
                deadline = time.monotonic() + 600
                others = jobs.exclude(fair_key="big")
                while others.unfinished().exists():
                    if time.monotonic() > deadline:
                        raise TimeoutError("the tenants' jobs did not finish")
                    time.sleep(0.05)
                span = others.aggregate(first=Min("started_at"), last=Max("finished_at"))
                first_start = jobs.aggregate(first=Min("started_at"))["first"]
                taken[big].append((span["last"] - first_start).total_seconds())
                measure.delete_jobs_of(QUEUE)
    alone, beside = statistics.median(taken[False]), statistics.median(taken[True])
    print(
        f"99 tenants x 20 jobs of 5 ms, capped at 2 per tenant, 4 x 8 threads: {alone:.2f} s "
        f"alone, {beside:.2f} s beside a tenant of 10,000 ({beside / alone:.2f}x; medians of "
        f"{rounds})"
    )


def bench_drain(rounds: int, count: int) -> None:
    from outbox_bench import measure
    from outbox_bench import tasks as bench_tasks

    rates: dict[bool, list[float]] = {False: [], True: []}
    with measure.running_workers(2, 8, 100):
        for _ in range(rounds):
            for limited in (False, True):
                task = bench_tasks.noop_limited if limited else bench_tasks.noop
                rates[limited].append(measure.drain(count, task))
    plain, capped = statistics.median(rates[False]), statistics.median(rates[True])
    print(
        f"drain of {count:,} no-op jobs, 2 x 8 threads, --prefetch 100: {plain:,.0f} jobs/s "
        f"without limits, {capped:,.0f} under a cap and rate not reached "
        f"({capped / plain:.2f}x; medians of {rounds}: "
        f"{[round(r) for r in rates[False]]} vs {[round(r) for r in rates[True]]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("figures", nargs="*", default=["cap", "kills", "rate", "tenants", "drain"])
    parser.add_argument("--seconds", type=float, default=40.0, help="the cap's run")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rate-jobs", type=int, default=3000)
    parser.add_argument("--processes", type=int, default=4, help="the rate's worker processes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    arguments = parser.parse_args()
    setup()
    for figure in arguments.figures:
        if figure == "cap":
            bench_cap(arguments.seconds, 0)
        elif figure == "kills":
            bench_cap(arguments.seconds, arguments.kills)
        elif figure == "rate":
            bench_rate(arguments.rate_jobs, arguments.processes)
        elif figure == "tenants":
            bench_tenants(arguments.rounds)
        elif figure == "drain":
            bench_drain(arguments.rounds, arguments.drain_jobs)
        else:
            parser.error(f"no figure {figure!r}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
