"""Fixtures shared by the suite. Tests run on the database DATABASE_URL names."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_outbox.worker.loop import Worker
from tests import processes


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    if connection.vendor != "postgresql":
        for item in items:
            if "postgresql" in item.keywords:
                item.add_marker(skip)
    # SQLite's one write lock: a handler that wrote holds up every other writer.
    one_writer = pytest.mark.skip(reason="needs row locks (PostgreSQL or MariaDB), not SQLite's")
    if connection.vendor == "sqlite":
        for item in items:
            if "row_locks" in item.keywords:
                item.add_marker(one_writer)


@pytest.fixture(autouse=True)
def _worker_processes_where_marked(request: pytest.FixtureRequest) -> None:
    """Let only tests marked ``process`` or ``chaos`` start worker processes."""
    processes.allowed = any(
        request.node.get_closest_marker(marker) for marker in ("process", "chaos")
    )


@pytest.fixture
def second_connection(transactional_db: None) -> Iterator[BaseDatabaseWrapper]:
    """A separate connection to the test database, as another process would have."""
    other = connections.create_connection("default")
    other.settings_dict = dict(connection.settings_dict)
    try:
        yield other
    finally:
        other.close()


@pytest.fixture
def workers() -> Iterator[Callable[..., Any]]:
    """Start worker subprocesses (``workers("--burst")``); any still running are killed after."""
    with processes.worker_processes() as start:
        yield start


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """The file record_run appends its runs to."""
    return tmp_path / "runs.log"


@pytest.fixture
def worker_thread() -> Iterator[Callable[..., Worker]]:
    """Start ``Worker(**options)`` in a thread of this process (``worker_thread(concurrency=2)``).

    At the end each is stopped and joined, and its helper threads (heartbeat, completer,
    listener, pruner) have ended and closed their connections.
    """
    before = set(threading.enumerate())
    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> Worker:
        worker = Worker(**options)
        thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, _thread in started:
        worker.request_stop()
    for _worker, thread in started:
        thread.join(20)
        assert not thread.is_alive(), "a worker thread did not stop"
    deadline = time.monotonic() + 10
    while True:
        helpers = [
            thread
            for thread in threading.enumerate()
            if thread.name.startswith("outbox-") and thread not in before
        ]
        if not helpers or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not helpers, f"worker threads still running: {helpers}"


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Record every claim of this process's workers as (limit asked for, jobs claimed)."""
    from django_outbox.db import queries_for
    from django_outbox.db.base import ClaimKind

    queries = queries_for(connection)
    real_claim = queries.claim
    seen: list[tuple[int, int]] = []

    def counting_claim(
        db: BaseDatabaseWrapper,
        worker_id: str,
        queues: Any,
        limit: int,
        lease_seconds: float,
        paused_retries: Any = (),
        kind: ClaimKind = ClaimKind.FULL,
        excluded_queues: Any = (),
    ) -> Any:
        jobs = real_claim(
            db,
            worker_id,
            queues,
            limit,
            lease_seconds,
            paused_retries,
            kind,
            excluded_queues=excluded_queues,
        )
        seen.append((limit, len(jobs)))
        return jobs

    monkeypatch.setattr(queries, "claim", counting_claim)
    return seen


@pytest.fixture
def handler_gate() -> Iterator[None]:
    """Reset the events the ``waits_for_test*`` tasks wait on; let any waiting handler go at
    the end."""
    from tests.testapp import tasks

    tasks.handler_started.clear()
    tasks.handler_may_finish.clear()
    tasks.lease_lost_seen.clear()
    yield
    tasks.handler_may_finish.set()
