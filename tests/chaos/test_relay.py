"""Fault injection on the relay: relay processes SIGKILLed and the broker restarted mid-run.

The broker is a private server (tests/chaos/brokers.py): a redis-server with its append-only
file fsynced at every write, a nats-server with JetStream, or a RabbitMQ node with a durable
queue; the shared ones serve other tests, and only a private one may be restarted. A RabbitMQ
node takes 7 to 19 s to boot or restart on the loaded 2-core machine (Redis and NATS a tenth
of a second): at CI size its case took 83 s, 40 s of them boots, on each database leg of
``make test``. It runs at full scale only (``OUTBOX_CHAOS_SCALE=full``, ``make chaos``).
The ledger then reads the broker back: every message arrived (0 lost), each key's first
deliveries in publish order (0 order violations), duplicates only from batches in flight at a
kill or a restart, and 0 duplicate effects behind receive_once.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_outbox import Message, publish_many
from tests.chaos.brokers import BROKERS, PrivateBroker, PrivateRabbitMQ, check_ledger
from tests.chaos.outcomes import FULL, report, scaled
from tests.processes import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.process, pytest.mark.django_db(transaction=True)]

BATCH = 50
LEASE = 2


@pytest.fixture(params=sorted(BROKERS))
def private_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PrivateBroker]:
    server_class = BROKERS[request.param]
    if server_class is PrivateRabbitMQ and not FULL:
        pytest.skip("a private RabbitMQ node's boots cost 40 s: OUTBOX_CHAOS_SCALE=full only")
    if not server_class.installed():
        pytest.skip(f"{server_class.program} is not installed (.ci/ensure-brokers)")
    server = server_class(tmp_path)
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_relay_kills_and_broker_restarts_lose_nothing_and_keep_each_keys_order(
    workers, private_broker, settings
):
    messages = scaled(3_000, 20_000)
    keys = scaled(20, 100)
    kills_wanted = scaled(10, 100)
    restarts_wanted = scaled(2, 10)
    brokers = {"default": {"BACKEND": private_broker.backend, "OPTIONS": private_broker.options()}}
    environment = {
        "OUTBOX_TEST_BROKERS": json.dumps(brokers),
        "OUTBOX_TEST_RELAY": json.dumps(
            {"BATCH_SIZE": BATCH, "LEASE_SECONDS": LEASE, "POLL_SECONDS": 0.1}
        ),
    }
    settings.OUTBOX = {**settings.OUTBOX, "BROKERS": brokers}
    topic = private_broker.topic
    rng = random.Random(24)

    def start_relay(number: int):
        return workers("--relay-only", "--worker-id", f"relay-{number}", **environment)

    began = time.monotonic()
    relays = {number: start_relay(number) for number in range(3)}
    # Published in chunks while the relays run: the kills land on claims, sends and deletes.
    published: list[str] = []
    per_chunk = 100
    kills = 0
    restart_times: list[float] = []
    chunks = messages // per_chunk
    for chunk in range(chunks):
        key = f"key-{rng.randrange(keys)}"
        sent = publish_many(
            topic, [{"seq": chunk * per_chunk + n} for n in range(per_chunk)], key=key
        )
        published += [str(message.id) for message in sent]
        if kills < kills_wanted and rng.random() < kills_wanted / chunks * 1.5:
            number = rng.randrange(len(relays))
            relays[number].kill()
            relays[number] = start_relay(number)
            kills += 1
        if len(restart_times) < restarts_wanted and rng.random() < restarts_wanted / chunks * 1.5:
            private_broker.kill()
            time.sleep(rng.uniform(0.2, 1.0))
            restart_times.append(private_broker.start())
        time.sleep(rng.uniform(0, 0.05))
    while kills < kills_wanted:
        number = rng.randrange(len(relays))
        relays[number].kill()
        relays[number] = start_relay(number)
        kills += 1
        time.sleep(0.2)
    wait_until(
        lambda: not Message.objects.exists(), timeout=scaled(120, 600), what="the relays to drain"
    )
    drained_in = time.monotonic() - began

    ledger = private_broker.ledger()
    figures = check_ledger(ledger, published)
    restarts = len(restart_times)
    report(
        f"relay_kills_and_broker_restarts_{private_broker.name}",
        messages=len(published),
        kills=kills,
        broker_restarts=restarts,
        broker_restart_s=[round(seconds, 1) for seconds in restart_times],
        drained_in_s=round(drained_in, 1),
        **figures,
    )
    assert figures["lost"] == 0
    assert figures["order_violations"] == 0
    # Only batches in flight at a kill or a restart are sent twice.
    assert figures["duplicates"] <= (kills + restarts) * BATCH
    assert figures["duplicate_effects"] == 0
