"""``manage.py outbox_relay_bench`` runs, reports every figure it was asked for, and cleans up.

It is run here with the in-memory broker (the brokers' own adapters are tested in
tests/relay/test_brokers.py), on PostgreSQL, where its figures are recorded: that the bench
works, not how fast the relay is (the relay's claims are tested on every database).
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import connection

from django_outbox.models import Message

pytestmark = [
    pytest.mark.process,
    pytest.mark.bench,
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True),
]


def test_every_figure_is_measured_and_no_message_is_left(monkeypatch):
    # The bench's publisher and relay processes inherit the environment: the test database.
    monkeypatch.setenv("OUTBOX_TEST_DATABASE_NAME", str(connection.settings_dict["NAME"]))
    out = io.StringIO()
    call_command(
        "outbox_relay_bench", "--json", "--broker", "memory", "--messages", "300",
        "--batch", "50", "--keys", "10", "--latency-rate", "40", "--latency-seconds", "1",
        "--latency-publishers", "4", "--idle-seconds", "1", "--relay-processes", "2",
        stdout=out,
    )  # fmt: skip
    results = json.loads(out.getvalue())
    figures = results["brokers"]["memory"]
    for rate in ("floor", "relay_keyless", "relay_keyed", "relays_keyless", "relays_keyed"):
        assert figures[rate] > 0, rate
    latency = figures["latency"]
    assert latency["messages"] >= 30
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"] < 30_000
    assert 0 <= results["idle_statements_per_second"] < 10
    assert not Message.objects.exists()
