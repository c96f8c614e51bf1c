"""``manage.py run_outbox_worker``: argument parsing and signal wiring around Worker."""

from __future__ import annotations

import logging
import signal
from argparse import ArgumentParser
from typing import Any

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError

from ...conf import get_settings
from ...validation.text import queue_name_error
from ...worker.stop_signals import exit_at_once, on_stop_signals
from ...worker.supervisor import Supervisor, WorkerOptions, configure_console_logging
from ..arguments import (
    concurrency_int,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    processes_int,
)


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
            type=concurrency_int,
            default=None,
            help="Threads running jobs (per process), each with its own database connection. "
            "Default: OUTBOX['CONCURRENCY'] (4).",
        )
        parser.add_argument(
            "--processes",
            type=processes_int,
            default=None,
            help="Worker processes, each with --concurrency threads, under one supervisor: "
            "use them to use every core. Default: OUTBOX['PROCESSES'] (1).",
        )
        parser.add_argument(
            "--prefetch",
            type=non_negative_int,
            default=None,
            help="Jobs claimed ahead of free threads (per process), for many short jobs. "
            "Default: OUTBOX['PREFETCH'] (0).",
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
            help="Exit after running this many jobs (each process, with --processes).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=non_negative_seconds,
            default=None,
            help="Seconds running jobs get to finish after a stop signal. "
            "Default: OUTBOX['SHUTDOWN_TIMEOUT'] (30).",
        )
        parser.add_argument("--worker-id", default=None, help="Name shown on the jobs it runs.")
        parser.add_argument(
            "--no-cron",
            action="store_false",
            dest="cron",
            help="Do not enqueue cron entries' jobs (other workers do); run them all the same.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for name in options["queues"]:
            if problem := queue_name_error(name):
                raise CommandError(f"--queue: {problem}")
        # Fails now, with the setting's error, rather than in a thread.
        processes = options["processes"] or get_settings().processes
        # The database's checks (a server version or an isolation level the queue cannot work
        # with), which Django runs only where asked to.
        self.check(tags=[Tags.database], databases=[get_settings().database])
        log_level = {0: logging.WARNING, 1: logging.INFO}.get(options["verbosity"], logging.DEBUG)
        configure_console_logging(log_level)
        worker_options = WorkerOptions(
            queues=options["queues"],
            concurrency=options["concurrency"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            shutdown_timeout=options["shutdown_timeout"],
            worker_id=options["worker_id"],
            prefetch=options["prefetch"],
            log_level=log_level,
            cron=options["cron"],
        )
        if processes > 1:
            self._supervise(worker_options, processes)
            return
        worker = worker_options.build_worker()

        def stop(signum: signal.Signals) -> None:
            self.stderr.write(
                f"Received {signum.name}: finishing running jobs (up to "
                f"{worker.shutdown_timeout}s); send it again to exit at once."
            )
            worker.request_stop()

        def abort(signum: signal.Signals) -> None:
            # The running jobs' leases expire and they run again.
            self.stderr.write(f"Received {signum.name} again: exiting at once.")
            exit_at_once(signum)

        on_stop_signals(stop, abort)
        stats = worker.run()
        self.stdout.write(f"Worker {worker.worker_id} stopped: {stats}.")

    def _supervise(self, worker_options: WorkerOptions, processes: int) -> None:
        supervisor = Supervisor(worker_options, processes)

        def stop(signum: signal.Signals) -> None:
            self.stderr.write(
                f"Received {signum.name}: workers finish their running jobs; send it again to "
                "exit at once."
            )
            supervisor.request_stop()

        def abort(signum: signal.Signals) -> None:
            self.stderr.write(f"Received {signum.name} again: workers exit at once.")
            supervisor.request_stop()

        on_stop_signals(stop, abort)
        failures = supervisor.run()
        self.stdout.write(f"All {processes} worker processes stopped.")
        if failures:
            raise CommandError(f"{failures} worker process exit(s) were errors; see the log.")
