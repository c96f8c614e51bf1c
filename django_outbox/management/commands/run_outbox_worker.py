"""``manage.py run_outbox_worker``: argument parsing and signal wiring around Worker."""

from __future__ import annotations

import logging
import signal
from argparse import ArgumentParser
from typing import Any

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError

from ...conf import get_settings
from ...worker.stop_signals import exit_at_once, on_stop_signals
from ...worker.supervisor import Supervisor, WorkerOptions, configure_console_logging
from ..arguments import (
    concurrency_int,
    non_negative_seconds,
    positive_int,
    prefetch_argument,
    processes_int,
    queue_argument,
    worker_id_argument,
    worker_id_for_processes,
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
            type=queue_argument,
            default=[],
            metavar="NAME",
            help="Run jobs of this queue; repeat for several. Default: every queue.",
        )
        parser.add_argument(
            "--exclude-queue",
            action="append",
            dest="excluded_queues",
            type=queue_argument,
            default=[],
            metavar="NAME",
            help="Run jobs of every queue but this one; repeat for several. Not with --queue.",
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
            "use them to use every core (with --relay-only: relay processes). Default: "
            "OUTBOX['PROCESSES'] (1).",
        )
        parser.add_argument(
            "--prefetch",
            type=prefetch_argument,
            default=None,
            help="Jobs claimed ahead of free threads (per process), for many short jobs; auto: "
            "as many as threads while jobs run shorter than 0.1 s, none otherwise. "
            "Default: OUTBOX['PREFETCH'] (auto).",
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
        parser.add_argument(
            "--worker-id",
            type=worker_id_argument,
            default=None,
            help="Name shown on the jobs it runs (at most 255 characters; with --processes, "
            "ID-1, ID-2...). Default: host, process id and a random suffix.",
        )
        parser.add_argument(
            "--no-cron",
            action="store_false",
            dest="cron",
            help="Do not enqueue cron entries' jobs (other workers do); run them all the same.",
        )
        relay = parser.add_mutually_exclusive_group()
        relay.add_argument(
            "--no-relay",
            action="store_false",
            dest="relay",
            help="Do not publish messages to brokers (other processes do). By default every "
            "worker runs the relay in a thread when OUTBOX['BROKERS'] names a broker.",
        )
        relay.add_argument(
            "--relay-only",
            action="store_true",
            help="Run only the relay (publish messages to brokers), no jobs; with --processes, "
            "a relay in each process.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["queues"] and options["excluded_queues"]:
            raise CommandError(
                "--exclude-queue runs every queue but those it names; --queue runs only those it "
                "names. Give one or the other."
            )
        # Fails now, with the setting's error, rather than in a thread.
        processes = options["processes"] or get_settings().processes
        if options["worker_id"] and (
            problem := worker_id_for_processes(options["worker_id"], processes)
        ):
            raise CommandError(problem)
        # The database's checks (a server version or an isolation level the queue cannot work
        # with), which Django runs only where asked to.
        self.check(tags=[Tags.database], databases=[get_settings().database])
        log_level = {0: logging.WARNING, 1: logging.INFO}.get(options["verbosity"], logging.DEBUG)
        configure_console_logging(log_level)
        if options["relay_only"]:
            if not get_settings().brokers:
                raise CommandError("--relay-only: OUTBOX['BROKERS'] names no broker.")
            relay_options = WorkerOptions(
                worker_id=options["worker_id"], log_level=log_level, relay_only=True
            )
            if processes > 1:
                self._supervise(relay_options, processes)
            else:
                self._relay_only(relay_options)
            return
        worker_options = WorkerOptions(
            queues=options["queues"],
            exclude_queues=options["excluded_queues"],
            concurrency=options["concurrency"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            shutdown_timeout=options["shutdown_timeout"],
            worker_id=options["worker_id"],
            prefetch=options["prefetch"],
            log_level=log_level,
            cron=options["cron"],
            relay=options["relay"],
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
        if worker.gave_up:
            raise CommandError(
                f"--burst: gave up, the database unreachable ({worker.gave_up}); jobs may "
                "still be waiting."
            )

    def _relay_only(self, relay_options: WorkerOptions) -> None:
        relay = relay_options.build_relay()

        def stop(signum: signal.Signals) -> None:
            self.stderr.write(f"Received {signum.name}: finishing the batch in flight.")
            relay.request_stop()

        def abort(signum: signal.Signals) -> None:
            # Its messages' leases expire and another relay publishes them.
            self.stderr.write(f"Received {signum.name} again: exiting at once.")
            exit_at_once(signum)

        on_stop_signals(stop, abort)
        stats = relay.run()
        self.stdout.write(f"Relay {relay.relay_id} stopped: {stats}.")

    def _supervise(self, worker_options: WorkerOptions, processes: int) -> None:
        supervisor = Supervisor(worker_options, processes)
        kind = "relay" if worker_options.relay_only else "worker"
        finishing = "the batches in flight" if worker_options.relay_only else "their running jobs"

        def stop(signum: signal.Signals) -> None:
            self.stderr.write(
                f"Received {signum.name}: {kind}s finish {finishing}; send it again to exit "
                "at once."
            )
            supervisor.request_stop()

        def abort(signum: signal.Signals) -> None:
            self.stderr.write(f"Received {signum.name} again: {kind}s exit at once.")
            supervisor.request_stop()

        on_stop_signals(stop, abort)
        failures = supervisor.run()
        self.stdout.write(f"All {processes} {kind} processes stopped.")
        if failures:
            raise CommandError(f"{failures} {kind} process exit(s) were errors; see the log.")
