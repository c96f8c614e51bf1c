"""django_outbox.healthy(): a worker in error (database errors) longer than allowed, past its
grace period, is unhealthy; the worker_unhealthy and worker_recovered signals mark the line."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test import override_settings

import django_outbox
from django_outbox import signals
from django_outbox.models import WorkerProcess
from django_outbox.worker import health
from django_outbox.worker.health import CLAIM, HEARTBEAT, WorkerHealth, is_healthy
from django_outbox.worker.loop import Worker
from tests.processes import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("in_error_for", "running_for", "expected"),
    [
        (None, 500, True),  # not in error
        (30, 500, True),  # in error, within the allowed time
        (60, 500, True),  # exactly the allowed time
        (61, 500, False),  # beyond it
        (500, 100, True),  # beyond it, but within the grace period after start
        (500, 120, False),  # the grace period is over
    ],
)
def test_the_rule(in_error_for, running_for, expected):
    assert (
        is_healthy(
            in_error_for=in_error_for,
            running_for=running_for,
            allowed_error_seconds=60,
            grace_seconds=120,
        )
        is expected
    )


def test_a_worker_is_unknown_until_its_first_claim_or_heartbeat():
    state = WorkerHealth(allowed_error_seconds=60, grace_seconds=0, clock=Clock())
    assert state.healthy() is None
    state.succeeded(CLAIM)
    assert state.healthy() is True


def test_on_change_is_called_once_when_the_error_outlasts_the_allowed_time_and_at_recovery():
    clock = Clock()
    changes: list[bool] = []
    state = WorkerHealth(
        allowed_error_seconds=60, grace_seconds=0, on_change=changes.append, clock=clock
    )
    state.succeeded(CLAIM)
    state.failed(HEARTBEAT, ConnectionError("server closed the connection\ndetails"))
    clock.now += 30
    state.failed(HEARTBEAT, ConnectionError("again"))
    assert (state.healthy(), changes) == (True, [])

    clock.now += 31
    state.failed(HEARTBEAT, ConnectionError("still"))
    state.failed(CLAIM, ConnectionError("the claim too"))
    assert (state.healthy(), changes) == (False, [False])
    assert state.in_error_for() == 61
    assert state.last_error() == ("ConnectionError: the claim too", 0)

    # In error while any of its loops is.
    state.succeeded(HEARTBEAT)
    assert (state.healthy(), changes) == (False, [False])
    state.succeeded(CLAIM)
    assert (state.healthy(), changes) == (True, [False, True])
    assert state.in_error_for() is None


def test_errors_in_the_grace_period_do_not_count_until_it_ends():
    clock = Clock()
    state = WorkerHealth(allowed_error_seconds=10, grace_seconds=120, clock=clock)
    state.failed(CLAIM, OSError("refused"))
    clock.now += 100
    assert state.healthy() is True
    clock.now += 21
    assert state.healthy() is False


def test_healthy_answers_for_every_worker_of_the_process():
    assert django_outbox.healthy() is None  # no worker runs here
    good = WorkerHealth(allowed_error_seconds=0, grace_seconds=0)
    bad = WorkerHealth(allowed_error_seconds=0, grace_seconds=0)
    unknown = WorkerHealth(allowed_error_seconds=0, grace_seconds=0)
    good.succeeded(CLAIM)
    bad.failed(CLAIM, OSError("refused"))
    try:
        health.track(good)
        assert django_outbox.healthy() is True
        health.track(unknown)
        assert django_outbox.healthy() is None
        health.track(bad)
        wait_until(lambda: django_outbox.healthy() is False, timeout=2)
    finally:
        for state in (good, bad, unknown):
            health.untrack(state)
    assert django_outbox.healthy() is None


@pytest.fixture
def unreachable_database(transactional_db: None) -> Iterator[Callable[[], None]]:
    """New connections to the test database fail (the server is unreachable) until the test
    calls the function this yields, as if the server came back. The test's own connection,
    already open, keeps working."""
    connection.ensure_connection()
    shared = connections.settings["default"]  # every thread's connection reads it
    saved = copy.deepcopy(shared)
    if connection.vendor == "postgresql":
        shared["PORT"] = "1"  # nothing listens there
    else:
        shared["NAME"] = str(Path(saved["NAME"]).parent / "no-such-directory" / "db.sqlite3")

    def repair() -> None:
        shared.update(saved)

    try:
        yield repair
    finally:
        repair()


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_database_is_unreachable_turns_unhealthy_keeps_running_and_recovers(
    unreachable_database, worker_thread
):
    received: list[tuple[str, dict[str, object]]] = []
    seen = threading.Event()

    def receiver(signal: object, sender: object, **kwargs: object) -> None:
        received.append(
            ("unhealthy" if signal is signals.worker_unhealthy else "recovered", kwargs)
        )
        seen.set()

    signals.worker_unhealthy.connect(receiver)
    signals.worker_recovered.connect(receiver)
    outbox = {**settings.OUTBOX, "HEALTH": {"ALLOWED_ERROR_SECONDS": 0.5, "GRACE_SECONDS": 0}}
    try:
        with override_settings(OUTBOX=outbox):
            worker: Worker = worker_thread(worker_id="cut-off")
            wait_until(seen.is_set, timeout=20, what="worker_unhealthy")
            assert [name for name, _ in received] == ["unhealthy"]
            assert received[0][1]["worker"] is worker
            assert "OperationalError" in str(received[0][1]["error"])
            assert django_outbox.healthy() is False
            assert not worker.stopping

            # The server is back: the next claim and heartbeat reconnect.
            seen.clear()
            unreachable_database()
            wait_until(seen.is_set, timeout=30, what="worker_recovered")
            assert [name for name, _ in received] == ["unhealthy", "recovered"]
            assert django_outbox.healthy() is True
            # Registered by a heartbeat once it could.
            wait_until(
                lambda: WorkerProcess.objects.filter(pk="cut-off", in_error_since=None).exists(),
                timeout=10,
                what="the registry row of a worker out of error",
            )
            row = WorkerProcess.objects.get(pk="cut-off")
            assert row.last_error.startswith("OperationalError")
            worker.request_stop()
            wait_until(lambda: not WorkerProcess.objects.filter(pk="cut-off").exists())
    finally:
        signals.worker_unhealthy.disconnect(receiver)
        signals.worker_recovered.disconnect(receiver)
