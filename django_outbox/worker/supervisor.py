"""``run_outbox_worker --processes P``: one supervisor process running P worker processes.

Threads share one interpreter lock, so Python work in handlers (and the worker's own per-job
work) uses one core per process; processes use them all. The supervisor starts each worker in
a fresh interpreter (the ``spawn`` method: no state copied from a parent that holds database
connections and threads), forwards stop signals, and restarts a worker that dies unexpectedly.

This module imports no models: a child imports it before ``django.setup()``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Literal

from .stop_signals import ABORT_SIGNAL, on_supervised_signals

if TYPE_CHECKING:
    from ..relay.loop import Relay
    from .loop import Worker

logger = logging.getLogger(__name__)

#: Pause before restarting a worker that died, doubled at each death in a row...
FIRST_RESTART_DELAY = 1.0
#: ...up to this...
MAX_RESTART_DELAY = 30.0
#: ...and back to the first once the worker has run this long: a death after a healthy run is
#: not part of a crash loop.
HEALTHY_RUN_SECONDS = 60.0
#: The exit code of a burst worker process that gave up (``Worker.gave_up``): not restarted.
GAVE_UP_EXIT_CODE = 3


@dataclass(frozen=True)
class WorkerOptions:
    """What each worker process runs with: ``Worker``'s arguments, and modules to import."""

    queues: Sequence[str] = ()
    exclude_queues: Sequence[str] = ()
    concurrency: int | None = None
    burst: bool = False
    max_jobs: int | None = None
    shutdown_timeout: float | None = None
    worker_id: str | None = None
    prefetch: int | Literal["auto"] | None = None
    log_level: int | None = None
    # Whether the worker enqueues cron entries' ticks (run_outbox_worker --no-cron: not).
    cron: bool = True
    # Whether the worker runs the relay in a thread (run_outbox_worker --no-relay: not).
    relay: bool = True
    # A relay alone in each process, no jobs (run_outbox_worker --relay-only --processes P).
    relay_only: bool = False
    # Log warnings and errors only, whatever the project's logging says (for the bench, where a
    # line per job would be most of what it measures).
    quiet: bool = False
    # Extra environment for the children.
    environ: dict[str, str] = field(default_factory=dict)
    # The process that started this worker; it stops when that one is gone.
    supervisor_pid: int | None = None

    def build_worker(self) -> Worker:
        """Return the Worker these options describe (after ``django.setup()``)."""
        # Imported here: a child process unpickles these options, so imports this module,
        # before django.setup(), and the worker's modules import the models.
        from .loop import Worker

        return Worker(
            queues=self.queues,
            exclude_queues=self.exclude_queues,
            concurrency=self.concurrency,
            burst=self.burst,
            max_jobs=self.max_jobs,
            shutdown_timeout=self.shutdown_timeout,
            worker_id=self.worker_id,
            prefetch=self.prefetch,
            cron=self.cron,
            relay=self.relay,
        )

    def build_relay(self) -> Relay:
        """Return the relay alone that these options describe (``relay_only``)."""
        from ..relay.loop import Relay
        from .loop import default_worker_id

        return Relay(relay_id=self.worker_id or default_worker_id())

    def build_runner(self) -> Worker | Relay:
        """Return what a process of these options runs: a relay alone, or a worker."""
        return self.build_relay() if self.relay_only else self.build_worker()

    def for_process(self, number: int) -> WorkerOptions:
        worker_id = f"{self.worker_id}-{number}" if self.worker_id else None
        return replace(self, worker_id=worker_id, supervisor_pid=os.getpid())


#: Django's tasks framework logs each task's enqueue (DEBUG), start and end (INFO, ERROR for a
#: failure) here: django.tasks on Django 6, the backport's django_tasks on 5.2.
DJANGO_TASKS_LOGGERS = ("django.tasks", "django_tasks")


def configure_console_logging(level: int) -> None:
    """Show the worker's log on stderr unless the project configured logging itself: the
    outbox's lines, and Django's tasks framework's (``Task id=... state=...``), at ``level``."""
    package_logger = logging.getLogger("django_outbox")
    if package_logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s %(message)s")
    )
    package_logger.addHandler(handler)
    package_logger.setLevel(level)
    for name in DJANGO_TASKS_LOGGERS:
        tasks_logger = logging.getLogger(name)
        if tasks_logger.handlers:
            continue
        tasks_logger.addHandler(handler)
        tasks_logger.setLevel(level)
        # Django's own "django" console handler shows them too when DEBUG is on: once is enough.
        tasks_logger.propagate = False


def run_worker_process(options: WorkerOptions) -> None:
    """The entry point of one worker (or relay) process started by the supervisor."""
    # Before anything slow: a stop that comes while Django starts is kept for the worker.
    worker: Worker | Relay | None = None
    stop_requested = threading.Event()

    def stop() -> None:
        stop_requested.set()
        if worker is not None:
            worker.request_stop()

    on_supervised_signals(stop)
    os.environ.update(options.environ)
    import django

    django.setup()
    if options.log_level is not None:
        configure_console_logging(options.log_level)
    if options.quiet:
        logging.getLogger("django_outbox").setLevel(logging.WARNING)
    worker = options.build_runner()
    if stop_requested.is_set():
        worker.request_stop()
    if options.supervisor_pid is not None:
        _stop_when_orphaned(options.supervisor_pid, worker.request_stop)
    worker.run()
    if getattr(worker, "gave_up", None):
        raise SystemExit(GAVE_UP_EXIT_CODE)


def _stop_when_orphaned(supervisor_pid: int, stop: Any) -> None:
    """Stop the worker if the supervisor dies (SIGKILL, OOM), rather than run on unsupervised.

    Its pid comes from the supervisor itself: one that died while this process was starting
    is noticed too.
    """

    def watch() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(0.5)
        logger.warning("supervisor %s is gone; stopping", supervisor_pid)
        stop()

    threading.Thread(target=watch, name="outbox-orphan-watch", daemon=True).start()


class Supervisor:
    """Run ``processes`` worker processes with ``options`` until stopped (or all are done)."""

    def __init__(self, options: WorkerOptions, processes: int) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1.")
        self.options = options
        self.processes = processes
        self._context = multiprocessing.get_context("spawn")
        self._children: dict[int, BaseProcess] = {}
        self._stopping = threading.Event()
        self._aborting = False
        # Each worker's own back-off (by process number), so that one crash loop never delays
        # restarting another, and the restarts waiting for their time.
        self._restart_delays: dict[int, float] = {}
        self._restart_at: dict[int, float] = {}
        self._started_at: dict[int, float] = {}

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        return [child.pid for child in self._children.values() if child.pid and child.is_alive()]

    def start(self) -> None:
        for number in range(1, self.processes + 1):
            self._start(number)

    def _start(self, number: int) -> None:
        child = self._context.Process(
            target=run_worker_process,
            args=(self.options.for_process(number),),
            name=f"outbox-worker-process-{number}",
        )
        child.start()
        self._started_at[number] = time.monotonic()
        self._children[number] = child
        logger.info("started worker process number=%s pid=%s", number, child.pid)

    def request_stop(self) -> None:
        """Ask every worker to stop gracefully; a second call makes them exit at once."""
        if self._stopping.is_set():
            self._aborting = True
        self._stopping.set()
        signum = ABORT_SIGNAL if self._aborting else signal.SIGTERM
        for child in self._children.values():
            if child.pid and child.is_alive():
                os.kill(child.pid, signum)

    def wait(self) -> int:
        """Supervise until every worker has exited; return how many exited with an error."""
        failures = 0
        while self._children or self._restart_at:
            timeout = 1.0
            if self._restart_at:
                timeout = min(timeout, max(0.0, min(self._restart_at.values()) - time.monotonic()))
            sentinels = [child.sentinel for child in self._children.values()]
            if sentinels:
                finished = wait(sentinels, timeout=timeout)
            else:
                self._stopping.wait(timeout)
                finished = []
            for number, child in list(self._children.items()):
                if child.sentinel not in finished:
                    continue
                child.join()
                del self._children[number]
                failures += self._on_exit(number, child)
            self._restart_due()
        return failures

    def _restart_due(self) -> None:
        """Start the workers whose restart is due (none once stopping)."""
        if self._stopping.is_set():
            self._restart_at.clear()
            return
        now = time.monotonic()
        for number, due in list(self._restart_at.items()):
            if due <= now:
                del self._restart_at[number]
                self._start(number)

    def _on_exit(self, number: int, child: BaseProcess) -> int:
        """Schedule ``child``'s restart if it should still run; return 1 if its exit was an
        error. Never waits: the others are supervised meanwhile."""
        code = child.exitcode
        if self._stopping.is_set():
            # A stop asked for is no error: a worker still starting when the stop came may die
            # of the SIGTERM itself, before it could claim anything.
            clean = code in (0, -signal.SIGTERM) or self._aborting
            return 0 if clean else 1
        if code == 0 and (self.options.burst or self.options.max_jobs):
            # Its work is done; the supervisor exits once every worker's is.
            return 0
        if code == GAVE_UP_EXIT_CODE and self.options.burst:
            # Its database stayed away longer than its health allows (logged by the worker):
            # a burst ends, with an error, rather than start again into the same outage.
            logger.error("burst worker process number=%s gave up", number)
            return 1
        ran = time.monotonic() - self._started_at.get(number, 0.0)
        delay = self._restart_delays.get(number, FIRST_RESTART_DELAY)
        if ran >= HEALTHY_RUN_SECONDS:
            delay = FIRST_RESTART_DELAY
        logger.error(
            "worker process number=%s pid=%s exited with code %s after %.0fs; restarting in %gs",
            number,
            child.pid,
            code,
            ran,
            delay,
        )
        self._restart_at[number] = time.monotonic() + delay
        self._restart_delays[number] = min(delay * 2, MAX_RESTART_DELAY)
        # Logged and dealt with: the supervisor's own exit is not an error for it.
        return 0

    def run(self) -> int:
        """Start the workers and supervise them until they have all exited."""
        self.start()
        try:
            return self.wait()
        finally:
            for child in self._children.values():
                if child.is_alive():
                    child.kill()
