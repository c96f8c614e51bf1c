"""The supervisor's restart back-off: per worker process, reset after a healthy run, and never
in the way of the other processes (no process started: the children are stand-ins)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from django_outbox.worker.supervisor import (
    FIRST_RESTART_DELAY,
    HEALTHY_RUN_SECONDS,
    MAX_RESTART_DELAY,
    Supervisor,
    WorkerOptions,
)


@pytest.fixture
def started() -> list[int]:
    """The process numbers the supervisor started, in order."""
    return []


@pytest.fixture
def supervisor(monkeypatch, started):
    supervisor = Supervisor(WorkerOptions(), processes=2)
    monkeypatch.setattr(supervisor, "_start", started.append)
    return supervisor


def crash(supervisor, number, ran_for=1.0):
    """Report that process ``number`` died after running ``ran_for`` seconds; return the delay
    before its restart."""
    supervisor._started_at[number] = time.monotonic() - ran_for
    began = time.monotonic()
    supervisor._on_exit(number, SimpleNamespace(exitcode=-9, pid=1000 + number))
    # Deciding never waits: the other processes are supervised meanwhile.
    assert time.monotonic() - began < 0.5
    return round(supervisor._restart_at.pop(number) - time.monotonic())


def test_a_crash_loop_backs_off_doubling_up_to_the_maximum(supervisor):
    delays = [crash(supervisor, 1) for _ in range(7)]
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    assert MAX_RESTART_DELAY == 30


def test_one_process_crash_looping_never_delays_restarting_another(supervisor):
    for _ in range(6):
        crash(supervisor, 1)
    assert crash(supervisor, 2) == FIRST_RESTART_DELAY


def test_the_back_off_resets_once_a_process_ran_healthily_for_a_minute(supervisor):
    for _ in range(5):
        crash(supervisor, 1)
    assert crash(supervisor, 1, ran_for=HEALTHY_RUN_SECONDS - 5) == 30
    assert crash(supervisor, 1, ran_for=HEALTHY_RUN_SECONDS) == FIRST_RESTART_DELAY
    assert HEALTHY_RUN_SECONDS == 60


def test_due_restarts_start_at_their_time_and_none_once_stopping(supervisor, started):
    supervisor._restart_at = {1: time.monotonic() - 0.1, 2: time.monotonic() + 60}
    supervisor._restart_due()
    assert started == [1]
    supervisor._stopping.set()
    supervisor._restart_at[2] = time.monotonic() - 1
    supervisor._restart_due()
    assert started == [1]
    assert not supervisor._restart_at
