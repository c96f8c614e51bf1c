"""Stop signals, for the worker command, the supervisor and its worker processes alike.

The first SIGTERM or SIGINT stops a worker gracefully: it claims nothing more, hands back what
it has not started and lets running jobs finish. A second one exits at once (the running jobs'
leases expire and they run again elsewhere).

Under a supervisor, a signal often reaches every process at once: systemd's default stop and
``kill -TERM -PGID`` signal the whole process group, and Ctrl-C in a terminal sends SIGINT to
it. A worker process therefore takes any number of SIGTERMs as one graceful stop and ignores
SIGINT; only its supervisor counts signals, and tells its workers to exit at once with
``ABORT_SIGNAL``, which nothing else sends.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

#: What a supervisor sends its worker processes to make them exit at once.
ABORT_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_at_once(signum: int) -> None:
    """Leave the process now, without waiting for threads; the exit code names the signal."""
    sys.stderr.flush()
    os._exit(128 + signum)


def _off_the_signal_handler(work: Callable[..., None], *args: object) -> None:
    """Run ``work`` on a thread of its own, not in the signal handler.

    A handler runs on the main thread between two of its bytecodes, possibly while that thread
    holds a lock: inside ``Event.wait()`` or ``Event.clear()`` (a plain, non-reentrant lock),
    or a stream's. Setting an event or writing a message right there can wait for ever on the
    thread's own lock; seen as a worker process that ignored every SIGTERM.
    """
    threading.Thread(target=work, args=args, name="outbox-stop-signal", daemon=True).start()


def on_stop_signals(
    stop: Callable[[signal.Signals], None], abort: Callable[[signal.Signals], None]
) -> None:
    """Call ``stop`` on the first SIGTERM or SIGINT, and ``abort`` on any later one."""
    received: list[signal.Signals] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum))
        if len(received) == 1:
            _off_the_signal_handler(stop, received[0])
        else:
            _off_the_signal_handler(abort, received[-1])

    for signum in STOP_SIGNALS:
        signal.signal(signum, handle)


def on_supervised_signals(stop: Callable[[], None]) -> None:
    """In a worker process: every SIGTERM is the same graceful ``stop``; ``ABORT_SIGNAL`` exits
    at once; SIGINT (Ctrl-C, which reaches the whole group) is left to the supervisor."""

    def handle_stop(signum: int, frame: FrameType | None) -> None:
        _off_the_signal_handler(stop)

    def handle_abort(signum: int, frame: FrameType | None) -> None:
        # Takes no lock: the process ends here.
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, handle_stop)
    signal.signal(ABORT_SIGNAL, handle_abort)
