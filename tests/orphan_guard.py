"""Ends a worker process the suite started once the pytest process that started it is gone.

A worker started by a test outlives a pytest that was killed (Ctrl-C twice, a CI time-out, a
SIGKILL), and goes on claiming from the test database: the next run of the suite then races
it. Imported by the settings of worker processes only (``OUTBOX_TEST_PARENT_PID`` is set), so
it covers the processes of ``--processes`` supervisors too, whose parent is not pytest.
"""

from __future__ import annotations

import os
import signal
import threading
import time

#: How often the guard looks for the pytest process.
INTERVAL_SECONDS = 1.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(pid: int) -> None:
    while _alive(pid):
        time.sleep(INTERVAL_SECONDS)
    # SIGKILL, as the crash it is: the suite that would read this worker's results is gone.
    os.kill(os.getpid(), signal.SIGKILL)


def start(pid: int) -> None:
    """Kill this process when process ``pid`` has exited."""
    threading.Thread(
        target=_watch, args=(pid,), name="outbox-test-orphan-guard", daemon=True
    ).start()
