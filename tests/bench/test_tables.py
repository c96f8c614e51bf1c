"""The bench's own tables are created while its worker processes write to the database."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from django.db import connection
from outbox_bench.tables import created, effect_model

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write lock")
def test_the_effect_table_is_created_while_another_connection_commits_writes():
    # The bench creates its table once its workers run, and their heartbeats commit writes.
    # A transaction that reads first (is the table there?) and writes next cannot take SQLite's
    # write lock once another connection has committed since its read: "database is locked" at
    # once, whatever the busy timeout (found by make test, on SQLite under load).
    stop = threading.Event()

    def commit_writes() -> None:
        other = sqlite3.connect(connection.settings_dict["NAME"], timeout=20)
        try:
            other.execute("CREATE TABLE IF NOT EXISTS bench_heartbeat (beat INTEGER)")
            other.commit()
            while not stop.is_set():
                other.execute("INSERT INTO bench_heartbeat VALUES (1)")
                other.commit()
                time.sleep(0.001)
            other.execute("DROP TABLE bench_heartbeat")
            other.commit()
        finally:
            other.close()

    writer = threading.Thread(target=commit_writes)
    writer.start()
    try:
        for _ in range(200):
            with created(effect_model(), "default") as model:
                assert model._meta.db_table in connection.introspection.table_names()
    finally:
        stop.set()
        writer.join()
    assert effect_model()._meta.db_table not in connection.introspection.table_names()
