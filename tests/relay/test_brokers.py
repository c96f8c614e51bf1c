"""Each broker adapter against its real server (Kafka: librdkafka's mock cluster)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from django_outbox import Message, MessageStatus, publish
from django_outbox.relay.brokers import BrokerUnavailable, close_brokers
from django_outbox.relay.loop import Relay

from .brokers import BROKERS, BrokerUnderTest, broker_under_test

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=sorted(BROKERS))
def broker(request: pytest.FixtureRequest) -> Iterator[BrokerUnderTest]:
    with broker_under_test(request.param) as under_test:
        outbox = {
            **settings.OUTBOX,
            "BROKERS": {
                "default": {"BACKEND": under_test.backend, "OPTIONS": under_test.options()}
            },
            "RELAY": {"RETRY_SECONDS": 60},
        }
        with override_settings(OUTBOX=outbox):
            try:
                yield under_test
            finally:
                close_brokers()


def test_every_message_arrives_once_with_its_id_and_each_key_in_order(broker):
    topic = broker.new_topic()
    published = []
    for n in range(60):
        key = None if n % 4 == 3 else f"order-{n % 4}"
        published.append(
            publish(topic, {"n": n}, key=key, type="OrderPlaced", headers={"trace": f"t{n}"})
        )
    stats = Relay(batch_size=25).drain()
    assert stats.sent == 60
    assert not Message.objects.exists()
    received = broker.received(topic, 60)
    assert sorted(r.message_id for r in received) == sorted(str(m.id) for m in published)
    by_id = {str(m.id): m for m in published}
    for message in received:
        sent = by_id[message.message_id]
        assert (message.key, message.type, message.payload) == (
            sent.key,
            "OrderPlaced",
            sent.payload,
        )
        assert message.headers.get("trace") == sent.headers["trace"]
    for key in ("order-0", "order-1", "order-2"):
        ns = [r.payload["n"] for r in received if r.key == key]
        assert ns == sorted(ns)
        assert len(ns) == 15


def test_a_refused_message_blocks_its_key_and_nothing_else(broker):
    topic = broker.new_topic()
    if broker.name == "kafka":
        # Larger than the producer's message.max.bytes: refused before it leaves.
        poison = publish(topic, {"blob": "x" * 20_000}, key="k")
        bad_topic = topic
    else:
        bad_topic = broker.unroutable_topic()
        poison = publish(bad_topic, {"n": 0}, key="k")
    behind = publish(bad_topic, {"n": 1}, key="k")
    publish(topic, {"n": 2}, key="other")
    stats = Relay().drain()
    assert stats.refused == 1
    row = Message.objects.get(pk=poison.pk)
    assert row.attempts == 1
    assert row.last_error
    if broker.name == "nats":
        # No stream captures the subject yet: tried again later, the key waiting meanwhile.
        assert row.status == MessageStatus.PENDING
        assert row.available_at is not None
    else:
        assert row.status == MessageStatus.BLOCKED
    assert Message.objects.get(pk=behind.pk).attempts == 0
    assert [r.payload for r in broker.received(topic, 1) if r.key == "other"] == [{"n": 2}]


def test_an_unreachable_broker_costs_no_attempt(broker):
    options = broker.options()
    unreachable = {
        "redis": {"url": "redis://127.0.0.1:1/0", "socket_timeout": 1},
        "rabbitmq": {"url": "amqp://guest:guest@127.0.0.1:1/%2F", "timeout": 1},
        "nats": {"servers": ["nats://127.0.0.1:1"], "timeout": 1},
        "kafka": {"config": {"bootstrap.servers": "127.0.0.1:1"}, "timeout": 1},
    }[broker.name]
    del options
    outbox = {
        **settings.OUTBOX,
        "BROKERS": {"default": {"BACKEND": broker.backend, "OPTIONS": unreachable}},
    }
    with override_settings(OUTBOX=outbox):
        close_brokers()
        publish(broker.new_topic(), {"n": 1}, key="k")
        with pytest.raises(BrokerUnavailable):
            Relay(poll_seconds=0.05).drain(timeout=1.5)
    assert list(Message.objects.values_list("attempts", "lease_token", "status")) == [
        (0, None, "pending")
    ]


def test_rabbitmq_reconnects_when_the_broker_closed_an_idle_connection():
    """A connection the broker closed (an idle relay's, past its heartbeats; an operator's
    close) is replaced: the next batch goes out on a new one, without a failed batch."""
    import shutil
    import subprocess
    import time
    import uuid

    from django_outbox.envelope import Envelope
    from django_outbox.relay.brokers.rabbitmq import RabbitMQ

    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed")
    with broker_under_test("rabbitmq") as rabbit:
        topic = rabbit.new_topic()
        name = f"outbox-test-{uuid.uuid4().hex}"
        options = rabbit.options()
        options["url"] += f"?client_properties={{'connection_name':'{name}'}}"
        adapter = RabbitMQ("default", **options)

        def message(n):
            return Envelope(
                id=uuid.uuid4(), topic=topic, key=None, type="", body=f'{{"n": {n}}}', broker="x"
            )

        try:
            assert adapter.publish([message(1)]) == [None]
            # The broker closes this connection (as it does one that missed its heartbeats).
            subprocess.run(
                ["rabbitmqctl", "close_connection", name, "idle test"],
                check=False,
                capture_output=True,
            )
            time.sleep(0.5)
            found = subprocess.run(
                ["rabbitmqctl", "list_connections", "name"], capture_output=True, text=True
            )
            if name in found.stdout:
                pytest.skip("rabbitmqctl could not close the connection here")
            assert adapter.publish([message(2)]) == [None]
        finally:
            adapter.close()
        assert [r.payload for r in rabbit.received(topic, 2)] == [{"n": 1}, {"n": 2}]


def test_an_unreachable_nats_server_fails_the_batch_at_once_and_quietly(caplog):
    """nats-py's first connect tries a dead server again and again, however reconnecting is
    set, unless it is told how often: the adapter gives up after its tries (NoServersError),
    not when its own deadline passes ("no answer in time", three timeouts later), and logs no
    traceback for each refused connection (the relay logs the outage once)."""
    import logging
    import uuid

    from django_outbox.envelope import Envelope
    from django_outbox.relay.brokers.nats import NatsJetStream

    pytest.importorskip("nats")
    adapter = NatsJetStream("default", servers=["nats://127.0.0.1:1"], timeout=5)
    message = Envelope(id=uuid.uuid4(), topic="t", key="k", type="", body="{}", broker="default")
    try:
        with (
            caplog.at_level(logging.DEBUG),
            pytest.raises(BrokerUnavailable, match="NoServersError"),
        ):
            adapter.publish([message])
    finally:
        adapter.close()
    loud = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert loud == []
