"""Fault injection on the relay: relay processes SIGKILLed and the broker restarted mid-run.

The broker is a private redis-server (its own port and directory, append-only file fsynced
at every write) or a private nats-server with JetStream (its own port and store): the shared
ones serve other tests, and only a private one may be restarted. (RabbitMQ is left out: a
private node takes a minute to boot and the shared one must not restart.)
The ledger then reads the stream: every message arrived (0 lost), each key's first deliveries
in publish order (0 order violations), duplicates only from batches in flight at a kill or a
restart, and 0 duplicate effects behind receive_once.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_outbox import Message, publish_many, receive_once
from tests.chaos.outcomes import report, scaled
from tests.processes import wait_until
from tests.testapp.models import Note

pytestmark = [pytest.mark.chaos, pytest.mark.process, pytest.mark.django_db(transaction=True)]

BATCH = 50
LEASE = 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test's own, which it may stop and start."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the private redis-server did not start")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


class PrivateNats(PrivateRedis):
    """A nats-server with JetStream of this test's own, with one stream for the topic."""

    STREAM = "chaos"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "nats-server",
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-sd",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the private nats-server did not start")
        # The stream persists in the store directory across restarts; created once.
        self._run(self._add_stream())

    def _run(self, coroutine: Any) -> Any:
        import asyncio

        return asyncio.run(coroutine)

    async def _add_stream(self) -> None:
        import nats

        client = await nats.connect(self.url)
        try:
            jetstream = client.jetstream()
            try:
                await jetstream.stream_info(self.STREAM)
            except Exception:  # No such stream yet.
                await jetstream.add_stream(name=self.STREAM, subjects=[f"{self.STREAM}.>"])
        finally:
            await client.close()

    def ledger(self, topic: str) -> list[tuple[str, str, int]]:
        entries: list[tuple[str, str, int]] = self._run(self._read())
        return entries

    async def _read(self) -> list[tuple[str, str, int]]:
        import nats

        client = await nats.connect(self.url)
        try:
            jetstream = client.jetstream()
            info = await jetstream.stream_info(self.STREAM)
            entries = []
            for sequence in range(info.state.first_seq, info.state.last_seq + 1):
                message = await jetstream.get_msg(self.STREAM, sequence)
                headers = message.headers or {}
                entries.append(
                    (
                        headers["Nats-Msg-Id"],
                        headers.get("message-key", ""),
                        json.loads(message.data or b"{}")["seq"],
                    )
                )
            return entries
        finally:
            await client.close()


def redis_ledger(url: str, topic: str) -> list[tuple[str, str, int]]:
    import redis

    client = redis.Redis.from_url(url)
    entries: Any = client.xrange(topic)
    client.close()
    return [
        (fields[b"id"].decode(), fields[b"key"].decode(), json.loads(fields[b"payload"])["seq"])
        for _entry, fields in entries
    ]


#: Each broker: its server, its adapter, and the topic the test publishes to.
BROKERS = {
    "redis": ("redis-server", PrivateRedis, "django_outbox.relay.brokers.redis.RedisStreams"),
    "nats": ("nats-server", PrivateNats, "django_outbox.relay.brokers.nats.NatsJetStream"),
}


@pytest.fixture(params=sorted(BROKERS))
def private_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PrivateRedis]:
    program, server_class, _backend = BROKERS[request.param]
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed (.ci/ensure-brokers)")
    server = server_class(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_relay_kills_and_broker_restarts_lose_nothing_and_keep_each_keys_order(
    workers, private_broker, settings
):
    nats = isinstance(private_broker, PrivateNats)
    messages = scaled(3_000, 20_000)
    keys = scaled(20, 100)
    kills_wanted = scaled(10, 100)
    restarts_wanted = scaled(2, 10)
    options: dict[str, Any] = (
        {"servers": [private_broker.url], "timeout": 2}
        if nats
        else {"url": private_broker.url, "socket_timeout": 2}
    )
    backend = BROKERS["nats" if nats else "redis"][2]
    brokers = {"default": {"BACKEND": backend, "OPTIONS": options}}
    environment = {
        "OUTBOX_TEST_BROKERS": json.dumps(brokers),
        "OUTBOX_TEST_RELAY": json.dumps(
            {"BATCH_SIZE": BATCH, "LEASE_SECONDS": LEASE, "POLL_SECONDS": 0.1}
        ),
    }
    settings.OUTBOX = {**settings.OUTBOX, "BROKERS": brokers}
    topic = f"{PrivateNats.STREAM}.events" if nats else "chaos"
    rng = random.Random(24)

    def start_relay(number: int):
        return workers("--relay-only", "--worker-id", f"relay-{number}", **environment)

    relays = {number: start_relay(number) for number in range(3)}
    # Published in chunks while the relays run: the kills land on claims, sends and deletes.
    published: list[str] = []
    per_chunk = 100
    kills = restarts = 0
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
        if restarts < restarts_wanted and rng.random() < restarts_wanted / chunks * 1.5:
            private_broker.kill()
            time.sleep(rng.uniform(0.2, 1.0))
            private_broker.start()
            restarts += 1
        time.sleep(rng.uniform(0, 0.05))
    while kills < kills_wanted:
        number = rng.randrange(len(relays))
        relays[number].kill()
        relays[number] = start_relay(number)
        kills += 1
        time.sleep(0.2)
    wait_until(lambda: not Message.objects.exists(), timeout=120, what="the relays to drain")

    ledger = (
        private_broker.ledger(topic)
        if isinstance(private_broker, PrivateNats)
        else redis_ledger(private_broker.url, topic)
    )
    received = Counter(message_id for message_id, _key, _seq in ledger)
    lost = set(published) - set(received)
    duplicates = sum(count - 1 for count in received.values())
    # Each key's first deliveries, in the stream's order, carry increasing sequence numbers.
    seen: set[str] = set()
    last: dict[str, int] = defaultdict(lambda: -1)
    violations = 0
    for message_id, key, seq in ledger:
        if message_id in seen:
            continue
        seen.add(message_id)
        violations += seq < last[key]
        last[key] = max(last[key], seq)
    # The consumer: every delivery through receive_once, redeliveries included.
    for message_id, _key, seq in ledger:
        with receive_once("chaos-consumer", message_id) as first:
            if first:
                Note.objects.create(text=str(seq))
    effects = Note.objects.count()
    report(
        f"relay_kills_and_broker_restarts_{'nats' if nats else 'redis'}",
        messages=len(published),
        kills=kills,
        broker_restarts=restarts,
        lost=len(lost),
        order_violations=violations,
        duplicates=duplicates,
        duplicate_effects=effects - len(received),
    )
    assert not lost
    assert violations == 0
    # Only batches in flight at a kill or a restart are sent twice.
    assert duplicates <= (kills + restarts) * BATCH
    assert effects == len(published)
