"""``manage.py outbox_health``: exit 0 when healthy, 1 when not; for probes, cron and people.

The checks live in ``django_outbox.health_report``; this parses options and prints.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...stats.probes import (
    WARN_DEAD_TUPLES,
    WARN_TRANSACTION_SECONDS,
    WARN_UNSENT_SECONDS,
    Thresholds,
    check_health,
)
from ..arguments import non_negative_seconds, positive_int, worker_id_argument


class Command(BaseCommand):
    help = (
        "Check that the outbox's database is reachable and its workers healthy (and, on "
        "PostgreSQL, the oldest open transaction and the job table's dead tuples). Exit "
        "status: 0 healthy (warnings allowed), 1 unhealthy, 2 bad options."
    )
    # A probe runs this every few seconds: the system checks would add to every run.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--worker-id",
            type=worker_id_argument,
            default=None,
            help="Check this worker only (and ID-1, ID-2... started by --processes under it): "
            "unhealthy if it is not registered, stale, or in error longer than allowed. For a "
            "liveness probe.",
        )
        parser.add_argument(
            "--require-workers",
            type=positive_int,
            default=0,
            metavar="N",
            help="Unhealthy unless at least N workers are live and healthy.",
        )
        parser.add_argument(
            "--warn-transaction-age",
            type=non_negative_seconds,
            default=WARN_TRANSACTION_SECONDS,
            metavar="SECONDS",
            help="PostgreSQL: warn when a transaction has been open longer (default "
            f"{WARN_TRANSACTION_SECONDS:g}).",
        )
        parser.add_argument(
            "--max-transaction-age",
            type=non_negative_seconds,
            default=None,
            metavar="SECONDS",
            help="PostgreSQL: unhealthy when a transaction has been open longer.",
        )
        parser.add_argument(
            "--warn-dead-tuples",
            type=positive_int,
            default=WARN_DEAD_TUPLES,
            metavar="N",
            help="PostgreSQL: warn above N dead rows in the job table (default "
            f"{WARN_DEAD_TUPLES:,}).",
        )
        parser.add_argument(
            "--max-dead-tuples",
            type=positive_int,
            default=None,
            metavar="N",
            help="PostgreSQL: unhealthy above N dead rows in the job table.",
        )
        parser.add_argument(
            "--warn-unsent-age",
            type=non_negative_seconds,
            default=WARN_UNSENT_SECONDS,
            metavar="SECONDS",
            help="Warn when a message for a broker has waited longer (default "
            f"{WARN_UNSENT_SECONDS:g}).",
        )
        parser.add_argument(
            "--max-unsent-age",
            type=non_negative_seconds,
            default=None,
            metavar="SECONDS",
            help="Unhealthy when a message for a broker has waited longer.",
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        report = check_health(
            Thresholds(
                worker_id=options["worker_id"],
                require_workers=options["require_workers"],
                warn_transaction_seconds=options["warn_transaction_age"],
                max_transaction_seconds=options["max_transaction_age"],
                warn_dead_tuples=options["warn_dead_tuples"],
                max_dead_tuples=options["max_dead_tuples"],
                warn_unsent_seconds=options["warn_unsent_age"],
                max_unsent_seconds=options["max_unsent_age"],
            )
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, default=str))
        else:
            self.stdout.write(report.as_text())
        if not report.healthy:
            reasons = "; ".join(f"{check.name}: {check.message}" for check in report.problems())
            raise CommandError(f"Unhealthy: {reasons}", returncode=1)
