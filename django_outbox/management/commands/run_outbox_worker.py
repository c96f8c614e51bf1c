"""``manage.py run_outbox_worker``: argument parsing and signal wiring around Worker."""

from __future__ import annotations

import logging
import os
import signal
import sys
from argparse import ArgumentParser, ArgumentTypeError
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_outbox.checks import queue_name_error
from django_outbox.conf import get_settings
from django_outbox.worker import Worker


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value < 0:
        raise ArgumentTypeError(f"expected seconds >= 0, got {value}")
    return value


class Command(BaseCommand):
    help = (
        "Run django-outbox jobs. SIGTERM or Ctrl-C stops claiming and lets running jobs finish "
        "(up to --shutdown-timeout); a second signal exits at once."
    )
    # A worker runs migrations-independent code; Django's checks still run at start.
    requires_system_checks = "__all__"

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            default=[],
            metavar="NAME",
            help="Run jobs of this queue; repeat for several. Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=None,
            help="Threads running jobs, each with its own database connection. "
            "Default: OUTBOX['CONCURRENCY'] (4).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit once no job is runnable now (jobs scheduled later are left).",
        )
        parser.add_argument(
            "--max-jobs",
            type=positive_int,
            default=None,
            help="Exit after running this many jobs.",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=non_negative_seconds,
            default=None,
            help="Seconds running jobs get to finish after a stop signal. "
            "Default: OUTBOX['SHUTDOWN_TIMEOUT'] (30).",
        )
        parser.add_argument("--worker-id", default=None, help="Name shown on the jobs it runs.")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in options["queues"]:
            if problem := queue_name_error(name):
                raise CommandError(f"--queue: {problem}")
        get_settings()  # Fails now, with the setting's error, rather than in a thread.
        self._configure_logging(options["verbosity"])
        worker = Worker(
            queues=options["queues"],
            concurrency=options["concurrency"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            shutdown_timeout=options["shutdown_timeout"],
            worker_id=options["worker_id"],
        )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if worker.stopping:
                # Second signal: exit now. The running jobs' leases expire and they run again.
                self.stderr.write(f"Received {signal.Signals(signum).name} again: exiting at once.")
                sys.stderr.flush()
                os._exit(128 + signum)
            self.stderr.write(
                f"Received {signal.Signals(signum).name}: finishing running jobs "
                f"(up to {worker.shutdown_timeout}s); send it again to exit at once."
            )
            worker.request_stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        stats = worker.run()
        self.stdout.write(f"Worker {worker.worker_id} stopped: {stats}.")

    def _configure_logging(self, verbosity: int) -> None:
        # Show the worker's log on the console unless the project configured the logger.
        logger = logging.getLogger("django_outbox")
        if logger.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
