"""``manage.py outbox_cron``: the cron entries, with their next and last runs."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...cron import CronStatus, schedule


class Command(BaseCommand):
    help = "List the cron entries: schedule, task, next run, last run and its job."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the entries as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        entries = schedule()
        if options["json"]:
            self.stdout.write(json.dumps([entry.as_dict() for entry in entries], indent=2))
            return
        self.stdout.write(table(entries))


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value is not None else "-"


def table(entries: list[CronStatus]) -> str:
    """Return ``entries`` as a text table, one line each."""
    if not entries:
        return "No cron entries: declare them with @task(cron=...) or OUTBOX['CRON']."
    rows = [("name", "schedule", "task", "next run", "last run", "last job")]
    for entry in entries:
        job = "-"
        if entry.last_job_id is not None:
            job = f"#{entry.last_job_id} {entry.last_job_status or 'pruned'}"
        rows.append(
            (
                entry.name,
                f"{entry.expression} ({entry.timezone})",
                entry.task,
                _when(entry.next_run),
                _when(entry.last_run),
                job,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
