"""``manage.py outbox_relay_bench``: the relay's throughput, latency and idle cost per broker."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...relay import BROKERS, format_relay_table, run_relay_bench


class Command(BaseCommand):
    help = "Measure the relay against each broker's own publish rate; latency; idle cost."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--broker", action="append", dest="brokers", choices=sorted(BROKERS), default=[]
        )
        parser.add_argument("--messages", type=int, default=20_000)
        parser.add_argument("--batch", type=int, default=500)
        parser.add_argument("--keys", type=int, default=100)
        parser.add_argument("--latency-rate", type=float, default=1000.0)
        parser.add_argument("--latency-seconds", type=float, default=10.0)
        parser.add_argument("--latency-publishers", type=int, default=8)
        parser.add_argument("--idle-seconds", type=float, default=10.0)
        parser.add_argument(
            "--relay-processes",
            type=int,
            default=1,
            help="also measure this many relay processes draining together (2 or more)",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        def log(line: str) -> None:
            sys.stderr.write(f"{line}\n")
            sys.stderr.flush()

        results = run_relay_bench(
            options["brokers"] or list(BROKERS),
            messages=options["messages"],
            batch=options["batch"],
            keys=options["keys"],
            latency_rate=options["latency_rate"],
            latency_seconds=options["latency_seconds"],
            latency_publishers=options["latency_publishers"],
            idle_seconds=options["idle_seconds"],
            log=log,
            relay_processes=options["relay_processes"],
        )
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            self.stdout.write(format_relay_table(results))
