"""``manage.py outbox_retry``: make failed (or named cancelled) jobs ready to run again."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...exceptions import JobNotFound, JobStateError
from ...jobs.housekeeping import jobs_to_retry, retry_jobs
from ..arguments import positive_int, queue_argument, task_name_argument
from ..output import job_count

#: How many jobs --dry-run lists before it only counts.
LISTED = 50


class Command(BaseCommand):
    help = (
        "Retry failed jobs: by id (failed or cancelled ones), by queue, by task, or all failed "
        "jobs. Each is made ready to run now with one more attempt. Refuses to run without a "
        "selector."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("ids", nargs="*", type=positive_int, help="Ids of jobs to retry.")
        parser.add_argument(
            "--queue", type=queue_argument, help="Retry the failed jobs of this queue."
        )
        parser.add_argument(
            "--task",
            type=task_name_argument,
            help="Retry the failed jobs of this task: an outbox task's name, or a Django task's "
            "module path.",
        )
        parser.add_argument("--all-failed", action="store_true", help="Retry every failed job.")
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be retried; change nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            jobs = jobs_to_retry(
                ids=options["ids"],
                queue=options["queue"],
                task=options["task"],
                all_failed=options["all_failed"],
            )
        except (ValueError, JobNotFound, JobStateError) as error:
            raise CommandError(str(error)) from error
        if options["dry_run"]:
            count = jobs.count()
            for job in jobs.only("id", "task_name", "queue", "status", "attempts", "last_error")[
                :LISTED
            ]:
                reason = job.last_error.splitlines()[0] if job.last_error else ""
                self.stdout.write(
                    f"#{job.pk} {job.task_name} queue={job.queue} {job.status} "
                    f"attempts={job.attempts} {reason}".rstrip()
                )
            if count > LISTED:
                self.stdout.write(f"... and {count - LISTED:,} more")
            self.stdout.write(f"Would retry {job_count(count)} (dry run: nothing changed).")
            return
        retried = retry_jobs(jobs)
        self.stdout.write(f"Retried {job_count(retried)}.")
