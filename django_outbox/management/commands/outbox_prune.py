"""``manage.py outbox_prune``: delete finished jobs older than a duration, in small batches."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...jobs.housekeeping import prune, prune_candidates
from ...models import FINISHED
from ..arguments import batch_size_int, duration_argument, queue_argument, task_name_argument
from ..output import job_count


class Command(BaseCommand):
    help = (
        "Delete finished jobs (succeeded, failed, cancelled) that finished longer ago than "
        "--older-than, in short batches that never hold up claims. Jobs an unfinished job "
        "depends on are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--older-than",
            type=duration_argument,
            required=True,
            help="Finished longer ago than this: 90s, 15m, 12h, 7d, 2w.",
        )
        parser.add_argument(
            "--status",
            action="append",
            # The values, not the members: argparse lists the choices by their repr.
            choices=[status.value for status in FINISHED],
            help="Only jobs of this status; repeat for several (default: all three).",
        )
        parser.add_argument(
            "--batch-size",
            type=batch_size_int,
            default=500,
            help="Jobs deleted per transaction, up to 100,000 (default 500).",
        )
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=queue_argument,
            default=[],
            metavar="NAME",
            help="Only jobs of this queue; repeat for several (default: every queue).",
        )
        parser.add_argument(
            "--task",
            type=task_name_argument,
            default=None,
            metavar="NAME",
            help="Only jobs of this task: an outbox task's name, or a Django task's module path.",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = options["older_than"]
        statuses = tuple(dict.fromkeys(options["status"] or FINISHED))
        selected = {"queues": options["queues"], "task": options["task"]}
        try:
            if options["dry_run"]:
                candidates = prune_candidates(older_than, statuses, **selected)
                for status, count in candidates.by_status.items():
                    self.stdout.write(f"{status}: {count:,}")
                kept = (
                    f" ({candidates.with_dependents:,} of them have dependents: kept while "
                    "those have not finished)"
                    if candidates.with_dependents
                    else ""
                )
                self.stdout.write(
                    f"Would delete up to {job_count(candidates.total)}{kept} (dry run: nothing "
                    "changed)."
                )
                return
            deleted = prune(older_than, statuses, batch_size=options["batch_size"], **selected)
        except ValueError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"Deleted {job_count(deleted)}.")
