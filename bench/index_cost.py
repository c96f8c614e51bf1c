"""What the admin's indexes over every job cost the writers: enqueues and drains with and
without them, alternated.

Run from ``example_project/``, as ``make bench`` runs ``outbox_bench`` (the database must exist;
the script drops and rebuilds the indexes it measures, so use a database of your own)::

    DEBUG=false DATABASE_URL=postgres://postgres@127.0.0.1:5432/outbox_bench PYTHONPATH=../bench \
        DJANGO_SETTINGS_MODULE=outbox_bench.settings ../.venv/bin/python ../bench/index_cost.py \
        [--rounds 3] [--jobs 20000] [--enqueue-jobs 3000] [--enqueue-clients 1 --enqueue-clients 4]

``outbox_job_queue`` (queue, id) and ``outbox_job_task`` (task_name, id) take an entry at each
enqueue and at each row version PostgreSQL cannot write in place: a claim and a completion change
the status, which the partial indexes' conditions name. Each round measures, in turn (the order
rotated from round to round), the table with both indexes, without ``outbox_job_task``, and
without either: ``outbox_bench``'s enqueue (one job per transaction, from 1 client or more, as
``--enqueue-clients`` says; beside a bare model's ``create()``, which no index of the job table
slows; clients beyond 1 are processes started for each figure, a minute of start-ups on a loaded
machine) and its drain of
no-op ``atomic=False`` jobs (2 worker processes x 8 threads, ``--prefetch 100``: the claims and
the completions). It prints each figure's median and, per round, its ratio to the table without
either index. The indexes are rebuilt at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The indexes measured, each state dropping those after it in this order.
INDEXES = ("outbox_job_task", "outbox_job_queue")
#: The states of the table: (name, the indexes it has).
STATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("both", INDEXES),
    ("without outbox_job_task", INDEXES[1:]),
    ("without either", ()),
)
BASELINE = "without either"
#: The drain's figures printed after the enqueues': (key, label).
DRAIN_FIGURES = (
    ("drain_per_s", "drain (claim and completion), jobs/s"),
    ("drain_cpu_us_per_job", "  worker CPU per job, us"),
)


def figures_of(clients: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
    """The figures measured with enqueues from each of ``clients``: (key, label)."""
    enqueues: list[tuple[str, str]] = []
    for count in clients:
        enqueues.append((f"enqueue_{count}_per_s", f"enqueue, {count} client(s), jobs/s"))
        enqueues.append((f"enqueue_{count}_cost_vs_create", "  its cost against a create()"))
    return (*enqueues, *DRAIN_FIGURES)


def setup() -> None:
    # The example project (the current directory) and the bench app.
    sys.path[:0] = [os.getcwd(), str(Path(__file__).resolve().parent)]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def set_indexes(present: tuple[str, ...]) -> None:
    """Build the indexes of INDEXES in ``present`` that are missing; drop the others."""
    from django.db import connections
    from outbox_bench.writes import using

    from django_outbox.models import Job

    connection = connections[using()]
    with connection.cursor() as cursor:
        existing = connection.introspection.get_constraints(cursor, Job._meta.db_table)
    with connection.schema_editor() as editor:
        for index in Job._meta.indexes:
            if index.name not in INDEXES:
                continue
            if index.name in present and index.name not in existing:
                editor.add_index(Job, index)
            elif index.name not in present and index.name in existing:
                editor.remove_index(Job, index)


def measure_state(enqueue_jobs: int, jobs: int, clients: tuple[int, ...]) -> dict[str, float]:
    """The figures of ``figures_of(clients)`` on the table as it is."""
    from outbox_bench import measure
    from outbox_bench import tasks as bench_tasks

    figures: dict[str, float] = {}
    for count in clients:
        rates = measure.measure_enqueue(enqueue_jobs, count)
        figures[f"enqueue_{count}_per_s"] = rates["enqueue"]
        figures[f"enqueue_{count}_cost_vs_create"] = rates["create"] / rates["enqueue"]
    with measure.running_workers(2, 8, 100) as workers:
        drained, cpu = measure.drain_with_cpu(workers, jobs, bench_tasks.noop)
    figures["drain_per_s"] = drained.per_s
    figures["drain_cpu_us_per_job"] = cpu
    measure.delete_bench_jobs()
    return figures


def progress(line: str) -> None:
    # Flushed: the rounds take minutes, and the output is often a file.
    print(line, flush=True)


def bench_indexes(
    rounds: int,
    enqueue_jobs: int,
    jobs: int,
    clients: tuple[int, ...],
    log: Callable[[str], None] = progress,
) -> dict[str, list[dict[str, float]]]:
    """Measure each state of STATES ``rounds`` times, in a rotated order; return the figures of
    each state's rounds (in round order)."""
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in STATES}
    try:
        for round_number in range(rounds):
            shift = round_number % len(STATES)
            for name, present in STATES[shift:] + STATES[:shift]:
                set_indexes(present)
                figures = measure_state(enqueue_jobs, jobs, clients)
                results[name].append(figures)
                enqueues = ", ".join(
                    f"{count} client(s) {figures[f'enqueue_{count}_per_s']:,.0f}/s"
                    for count in clients
                )
                log(
                    f"round {round_number + 1}, {name}: enqueue {enqueues}; drain "
                    f"{figures['drain_per_s']:,.0f}/s"
                )
    finally:
        set_indexes(INDEXES)
    return results


def report(results: dict[str, list[dict[str, float]]], clients: tuple[int, ...]) -> None:
    rounds = len(results[BASELINE])
    print(f"\nMedians of {rounds} rounds; in brackets each round's ratio to '{BASELINE}'")
    print("(a ratio below 1 for a rate, above 1 for a cost or CPU, is what the indexes cost):")
    for key, label in figures_of(clients):
        print(label)
        for name, _ in STATES:
            values = [figures[key] for figures in results[name]]
            ratios = [
                value / baseline[key]
                for value, baseline in zip(values, results[BASELINE], strict=True)
            ]
            text = f"    {name:<26} {_number(statistics.median(values)):>9}"
            if name != BASELINE:
                text += f"  x{statistics.median(ratios):.2f} ("
                text += ", ".join(f"{ratio:.2f}" for ratio in ratios) + ")"
            print(text)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000, help="Jobs a drain (20,000).")
    parser.add_argument(
        "--enqueue-jobs", type=int, default=3_000, help="Jobs enqueued a figure (3,000)."
    )
    parser.add_argument(
        "--enqueue-clients",
        type=int,
        action="append",
        help="Clients enqueueing at once; repeat for several (default: 1).",
    )
    arguments = parser.parse_args()
    clients = tuple(arguments.enqueue_clients or [1])
    setup()
    results: Any = bench_indexes(arguments.rounds, arguments.enqueue_jobs, arguments.jobs, clients)
    report(results, clients)


if __name__ == "__main__":
    main()
