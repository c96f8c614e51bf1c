"""Drains of no-op jobs at ``--prefetch 0``, ``auto`` (the default) and ``100``, alternated.

Run from ``example_project/``, as ``make bench`` runs ``outbox_bench`` (the database must exist)::

    DEBUG=false DATABASE_URL=postgres://postgres@127.0.0.1:5432/outbox_bench PYTHONPATH=../bench \
        DJANGO_SETTINGS_MODULE=outbox_bench.settings ../.venv/bin/python ../bench/prefetch.py \
        [--rounds 3] [--jobs 10000]

Each round starts 2 worker processes x 8 threads at each prefetch in turn and drains the same
number of no-op ``atomic=False`` jobs; medians of jobs/s, and each prefetch's as a ratio of
``--prefetch 100``'s (ratios inside one invocation: the machine's load varies between runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Literal

PREFETCHES: tuple[int | Literal["auto"], ...] = (0, "auto", 100)


def setup() -> None:
    # The example project (the current directory) and the bench app.
    sys.path[:0] = [os.getcwd(), str(Path(__file__).resolve().parent)]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def bench_prefetch(rounds: int, count: int) -> None:
    from outbox_bench import measure
    from outbox_bench import tasks as bench_tasks

    rates: dict[int | Literal["auto"], list[float]] = {prefetch: [] for prefetch in PREFETCHES}
    for _ in range(rounds):
        for prefetch in PREFETCHES:
            with measure.running_workers(2, 8, prefetch):
                rates[prefetch].append(measure.drain(count, bench_tasks.noop))
    fastest = statistics.median(rates[100])
    print(f"drains of {count:,} no-op jobs, 2 processes x 8 threads, medians of {rounds}:")
    for prefetch in PREFETCHES:
        rate = statistics.median(rates[prefetch])
        runs = [round(run) for run in rates[prefetch]]
        print(
            f"  --prefetch {prefetch}: {rate:,.0f} jobs/s, {rate / fastest:.2f} of --prefetch 100 "
            f"(runs {runs})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10_000)
    arguments = parser.parse_args()
    setup()
    bench_prefetch(arguments.rounds, arguments.jobs)


if __name__ == "__main__":
    main()
