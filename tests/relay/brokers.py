"""Real brokers for the relay's tests: settings for each, and a reader of what it received.

Each test gets topics of its own (a random suffix) and removes them after, since the servers
are shared. A server that does not answer skips its tests, or fails them under CI (where
``.ci/ensure-brokers`` started it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

REDIS_URL = os.environ.get("OUTBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RABBITMQ_URL = os.environ.get("OUTBOX_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
NATS_URL = os.environ.get("OUTBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")


@dataclass
class Received:
    """One message as a consumer got it."""

    message_id: str
    key: str | None
    type: str
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)


def require_port(host: str, port: int, what: str) -> None:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        message = f"{what} does not answer on {host}:{port} (.ci/ensure-brokers starts it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


class BrokerUnderTest:
    """A broker's OPTIONS for OUTBOX["BROKERS"], a fresh topic, and a reader."""

    backend: str
    name: str

    def options(self) -> dict[str, Any]:
        raise NotImplementedError

    def new_topic(self) -> str:
        raise NotImplementedError

    def received(self, topic: str, expected: int) -> list[Received]:
        raise NotImplementedError

    def unroutable_topic(self) -> str:
        """A topic the broker refuses."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class Redis(BrokerUnderTest):
    backend = "django_outbox.relay.brokers.redis.RedisStreams"
    name = "redis"

    def __init__(self) -> None:
        import redis

        require_port("127.0.0.1", 6379, "Redis")
        self.client = redis.Redis.from_url(REDIS_URL)
        self.keys: list[str] = []

    def options(self) -> dict[str, Any]:
        return {"url": REDIS_URL}

    def new_topic(self) -> str:
        topic = f"outbox-test-{uuid.uuid4().hex}"
        self.keys.append(topic)
        return topic

    def received(self, topic: str, expected: int) -> list[Received]:
        entries: Any = self.client.xrange(topic)
        return [
            Received(
                message_id=fields[b"id"].decode(),
                key=fields[b"key"].decode() or None,
                type=fields[b"type"].decode(),
                payload=json.loads(fields[b"payload"]),
                headers=json.loads(fields[b"headers"]),
            )
            for _entry_id, fields in entries
        ]

    def unroutable_topic(self) -> str:
        # A key that holds a string, not a stream: XADD fails with WRONGTYPE.
        topic = self.new_topic()
        self.client.set(topic, "not a stream")
        return topic

    def close(self) -> None:
        if self.keys:
            self.client.delete(*self.keys)
        self.client.close()


class RabbitMQ(BrokerUnderTest):
    backend = "django_outbox.relay.brokers.rabbitmq.RabbitMQ"
    name = "rabbitmq"

    def __init__(self) -> None:
        import pika

        require_port("127.0.0.1", 5672, "RabbitMQ")
        self.connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
        self.channel = self.connection.channel()
        self.queues: list[str] = []

    def options(self) -> dict[str, Any]:
        return {"url": RABBITMQ_URL}

    def new_topic(self) -> str:
        # The default exchange routes a message to the queue its routing key names.
        queue = f"outbox-test-{uuid.uuid4().hex}"
        self.channel.queue_declare(queue, durable=True)
        self.queues.append(queue)
        return queue

    def received(self, topic: str, expected: int) -> list[Received]:
        got: list[Received] = []
        while True:
            method, properties, body = self.channel.basic_get(topic, auto_ack=True)
            if method is None:
                return got
            headers = dict(properties.headers or {})
            got.append(
                Received(
                    message_id=properties.message_id,
                    key=headers.pop("message-key", None),
                    type=properties.type or "",
                    payload=json.loads(body),
                    headers=headers,
                )
            )

    def unroutable_topic(self) -> str:
        return f"outbox-test-nowhere-{uuid.uuid4().hex}"

    def close(self) -> None:
        for queue in self.queues:
            self.channel.queue_delete(queue)
        self.connection.close()


class NatsJetStream(BrokerUnderTest):
    backend = "django_outbox.relay.brokers.nats.NatsJetStream"
    name = "nats"

    def __init__(self) -> None:
        require_port("127.0.0.1", 4222, "NATS")
        self.loop = asyncio.new_event_loop()
        self.streams: list[str] = []
        self.client = self.loop.run_until_complete(self._connect())
        self.jetstream = self.client.jetstream()

    async def _connect(self) -> Any:
        import nats

        return await nats.connect(NATS_URL)

    def options(self) -> dict[str, Any]:
        return {"servers": [NATS_URL], "timeout": 5}

    def new_topic(self) -> str:
        name = f"outbox_test_{uuid.uuid4().hex}"
        self.loop.run_until_complete(self.jetstream.add_stream(name=name, subjects=[f"{name}.>"]))
        self.streams.append(name)
        return f"{name}.events"

    def received(self, topic: str, expected: int) -> list[Received]:
        stream = topic.split(".")[0]
        return self.loop.run_until_complete(self._read(stream))

    async def _read(self, stream: str) -> list[Received]:
        info = await self.jetstream.stream_info(stream)
        got = []
        for sequence in range(info.state.first_seq, info.state.last_seq + 1):
            if info.state.messages == 0:
                break
            message = await self.jetstream.get_msg(stream, sequence)
            headers = dict(message.headers or {})
            got.append(
                Received(
                    message_id=headers.pop("Nats-Msg-Id"),
                    key=headers.pop("message-key", None),
                    type=headers.pop("message-type", ""),
                    payload=json.loads(message.data),
                    headers={k: v for k, v in headers.items() if k != "message-id"},
                )
            )
        return got

    def unroutable_topic(self) -> str:
        return f"outbox_test_nowhere_{uuid.uuid4().hex}.events"

    def close(self) -> None:
        for stream in self.streams:
            self.loop.run_until_complete(self.jetstream.delete_stream(stream))
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


class _BootstrapCatcher(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.bootstrap: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"replaced with (\S+)", record.getMessage())
        if found:
            self.bootstrap = found.group(1)


class Kafka(BrokerUnderTest):
    """librdkafka's mock cluster, started by the relay's producer (no Kafka server here)."""

    backend = "django_outbox.relay.brokers.kafka.Kafka"
    name = "kafka"

    def __init__(self) -> None:
        self.catcher = _BootstrapCatcher()
        self.logger = logging.getLogger(f"outbox-test-kafka-{uuid.uuid4().hex}")
        self.logger.addHandler(self.catcher)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False

    def options(self) -> dict[str, Any]:
        return {
            "config": {
                "test.mock.num.brokers": 1,
                "logger": self.logger,
                # Small, so a test can send a record the producer refuses.
                "message.max.bytes": 10_000,
            },
            "timeout": 5,
        }

    def new_topic(self) -> str:
        # The mock cluster creates topics on first use.
        return f"outbox-test-{uuid.uuid4().hex}"

    def received(self, topic: str, expected: int) -> list[Received]:
        import confluent_kafka

        assert self.catcher.bootstrap, "the mock cluster's address was not logged"
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.catcher.bootstrap,
                "group.id": uuid.uuid4().hex,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        got: list[Received] = []
        try:
            for _ in range(100):
                records: list[Any] = consumer.consume(expected - len(got) or 1, timeout=0.5)
                for record in records:
                    if record.error():
                        continue
                    headers = {name: value.decode() for name, value in record.headers() or []}
                    got.append(
                        Received(
                            message_id=headers.pop("message-id"),
                            key=record.key().decode() if record.key() is not None else None,
                            type=headers.pop("message-type", ""),
                            payload=json.loads(record.value()),
                            headers={k: v for k, v in headers.items() if k != "message-key"},
                        )
                    )
                if len(got) >= expected:
                    break
        finally:
            consumer.close()
        return got

    def unroutable_topic(self) -> str:
        raise NotImplementedError("a mock cluster creates any topic; tests send a huge record")


BROKERS = {"redis": Redis, "rabbitmq": RabbitMQ, "nats": NatsJetStream, "kafka": Kafka}


@contextmanager
def broker_under_test(name: str) -> Iterator[BrokerUnderTest]:
    broker = BROKERS[name]()
    try:
        yield broker
    finally:
        broker.close()
