"""``manage.py outbox_bench``: measure django-outbox on this project's database and machine."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from django_outbox.management.arguments import non_negative_int, positive_int
from outbox_bench.suite import PARTS, BenchConfig, format_table, run_bench
from outbox_bench.writes import using


class Command(BaseCommand):
    help = (
        "Measure enqueue rates, drain rates, enqueue-to-start latency and worker memory on the "
        "outbox database, with worker processes of its own. It writes and deletes jobs of queue "
        "'outbox-bench': run it where no other worker runs every queue. With 'floor' (the "
        "default, PostgreSQL), pgbench measures what the database itself does, for ratios."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        defaults = BenchConfig()
        parser.add_argument("--runs", type=positive_int, default=defaults.runs)
        parser.add_argument(
            "--jobs", type=positive_int, default=defaults.jobs, help="Jobs per drain run."
        )
        parser.add_argument("--processes", type=positive_int, default=defaults.processes)
        parser.add_argument("--concurrency", type=positive_int, default=defaults.concurrency)
        parser.add_argument("--prefetch", type=non_negative_int, default=defaults.prefetch)
        parser.add_argument(
            "--enqueue-jobs",
            type=positive_int,
            default=defaults.enqueue_jobs,
            help="Jobs enqueued one per transaction, per run.",
        )
        parser.add_argument(
            "--enqueue-clients",
            type=positive_int,
            default=defaults.enqueue_clients,
            help="Threads enqueueing at once (besides the 1-client figure).",
        )
        parser.add_argument("--bulk-batch", type=positive_int, default=defaults.bulk_batch)
        parser.add_argument(
            "--latency-samples", type=positive_int, default=defaults.latency_samples
        )
        parser.add_argument(
            "--retained",
            type=positive_int,
            default=defaults.retained,
            help="Finished jobs in the table for the large-table drain.",
        )
        parser.add_argument(
            "--ready",
            type=positive_int,
            default=defaults.ready,
            help="Jobs drained with and without the finished ones.",
        )
        parser.add_argument(
            "--fair-keys",
            type=positive_int,
            default=defaults.fair_keys,
            help="Fair keys the fair drain spreads its jobs over.",
        )
        parser.add_argument(
            "--fair-backlog",
            type=positive_int,
            default=defaults.fair_backlog,
            help="Jobs of one key a new key's job is enqueued behind.",
        )
        parser.add_argument(
            "--floor-seconds", type=positive_int, default=int(defaults.floor_seconds)
        )
        parser.add_argument(
            "--idle-seconds",
            type=positive_int,
            default=int(defaults.idle_seconds),
            help="Seconds an idle worker's CPU time is measured over.",
        )
        parser.add_argument(
            "--only",
            action="append",
            choices=PARTS,
            default=[],
            help="Measure only this part; repeat for several. Default: all.",
        )
        parser.add_argument(
            "--skip", action="append", choices=PARTS, default=[], help="Leave out this part."
        )
        parser.add_argument(
            "--json", action="store_true", help="Print the results as JSON on stdout."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        vendor = connections[using()].vendor
        if vendor not in ("postgresql", "sqlite", "mysql"):
            raise CommandError(
                f"outbox_bench supports PostgreSQL, SQLite and MariaDB, not {vendor}."
            )
        parts = tuple(
            part
            for part in PARTS
            if (not options["only"] or part in options["only"]) and part not in options["skip"]
        )
        if not parts:
            raise CommandError("--only and --skip leave nothing to measure.")
        config = BenchConfig(
            runs=options["runs"],
            jobs=options["jobs"],
            processes=options["processes"],
            concurrency=options["concurrency"],
            prefetch=options["prefetch"],
            enqueue_jobs=options["enqueue_jobs"],
            enqueue_clients=options["enqueue_clients"],
            bulk_batch=options["bulk_batch"],
            latency_samples=options["latency_samples"],
            retained=options["retained"],
            ready=options["ready"],
            fair_keys=options["fair_keys"],
            fair_backlog=options["fair_backlog"],
            floor_seconds=options["floor_seconds"],
            idle_seconds=options["idle_seconds"],
            parts=parts,
        )

        def log(line: str) -> None:
            # Progress goes to stderr, so that --json output stays parseable.
            if options["verbosity"] > 0:
                sys.stderr.write(f"{line}\n")
                sys.stderr.flush()

        if settings.DEBUG:
            log(
                "Warning: DEBUG is on, so every query is recorded; figures will be lower than "
                "in production. Run with DEBUG off."
            )
        results = run_bench(config, log)
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2, default=str))
        else:
            self.stdout.write(format_table(results))
