"""``manage.py demo``: run the example's walk-through (see signups.demo) and print a report."""

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from signups.demo import Demo


class Command(BaseCommand):
    help = (
        "Sign up demo users (their welcome emails go through the outbox), roll one signup "
        "back, run a worker until every job is finished, and report what happened."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["verbosity"] < 2:
            # The worker's retries and failures only; -v 2 shows every job it runs.
            logging.getLogger("django_outbox").setLevel(logging.WARNING)

        def say(text: str) -> None:
            self.stdout.write(text)
            # Keep the report in step with the worker's log on stderr, even through a pipe.
            self.stdout.flush()

        if not Demo(say).run():
            raise CommandError("The demo did not end as expected; see the report above.")
