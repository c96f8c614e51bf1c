"""``run_outbox_worker --relay-only`` as a process, relaying to Redis."""

from __future__ import annotations

import json
import signal
from collections import defaultdict

import pytest

from django_outbox import Message, publish_many

from .brokers import REDIS_URL, broker_under_test

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

BROKERS = json.dumps(
    {
        "default": {
            "BACKEND": "django_outbox.relay.brokers.redis.RedisStreams",
            "OPTIONS": {"url": REDIS_URL},
        }
    }
)


def test_two_relay_processes_publish_everything_once_keeping_each_keys_order(workers, settings):
    from tests.processes import wait_until

    with broker_under_test("redis") as redis:
        settings.OUTBOX = {**settings.OUTBOX, "BROKERS": json.loads(BROKERS)}
        topic = redis.new_topic()
        relays = [
            workers("--relay-only", "--worker-id", f"relay-{n}", OUTBOX_TEST_BROKERS=BROKERS)
            for n in range(2)
        ]
        # A SIGTERM that lands before a process has set its handlers (a slow start on a loaded
        # machine) kills it; the test is about stopping running relays.
        for relay in relays:
            relay.wait_for_output("relay started", timeout=60)
        for start in range(0, 600, 50):
            publish_many(topic, [{"n": n} for n in range(start, start + 50)], key=f"k{start % 7}")
        wait_until(lambda: not Message.objects.exists(), timeout=30, what="the relays to drain")
        received = redis.received(topic, 600)
        assert sorted(r.payload["n"] for r in received) == list(range(600))
        by_key = defaultdict(list)
        for message in received:
            by_key[message.key].append(message.payload["n"])
        assert all(ns == sorted(ns) for ns in by_key.values())
        for relay in relays:
            relay.send(signal.SIGTERM)
        for relay in relays:
            assert relay.wait(15) == 0, relay.stderr
            assert "Relay relay-" in relay.stdout


def test_relay_only_with_processes_runs_a_relay_in_each_process_under_one_supervisor(
    workers, settings
):
    from tests.processes import wait_until

    with broker_under_test("redis") as redis:
        settings.OUTBOX = {**settings.OUTBOX, "BROKERS": json.loads(BROKERS)}
        topic = redis.new_topic()
        supervisor = workers(
            "--relay-only", "--processes", "2", "--worker-id", "relay", OUTBOX_TEST_BROKERS=BROKERS
        )
        supervisor.wait_for_output("relay started relay=relay-1", timeout=60)
        supervisor.wait_for_output("relay started relay=relay-2", timeout=60)
        publish_many(topic, [{"n": n} for n in range(300)], key="k")
        wait_until(lambda: not Message.objects.exists(), timeout=30, what="the relays to drain")
        received = redis.received(topic, 300)
        assert [r.payload["n"] for r in received] == list(range(300))
        supervisor.send(signal.SIGTERM)
        assert supervisor.wait(15) == 0, supervisor.stderr
        assert "All 2 relay processes stopped." in supervisor.stdout
        assert "relays finish the batches in flight" in supervisor.stderr
