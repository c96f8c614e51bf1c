"""The relay's bench: throughput against the broker's own publish rate, latency, idle cost.

For each broker:

- floor: the adapter alone (the same client, no database) publishes batches of messages with
  confirms pipelined, as fast as it can: the broker's own rate;
- relay: one relay (a thread, as workers run it) drains messages already committed (keyless,
  and with 100 keys), claiming, publishing and deleting them: its rate, and its ratio to the
  floor;
- latency: publishers in another process commit messages at a steady rate (one per
  transaction) while a relay runs in a thread, woken by NOTIFY on PostgreSQL:
  commit-to-confirm percentiles;
- idle: statements an idle relay runs per second.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction
from django.test import override_settings
from django.utils.module_loading import import_string

from django_outbox import publish, publish_many
from django_outbox.conf import get_settings
from django_outbox.envelope import Envelope
from django_outbox.models import Message
from django_outbox.relay.brokers import Broker, Outcome, close_brokers
from django_outbox.relay.loop import Relay

from .relay_publishers import publish_steadily, relay_until_stopped

REDIS_URL = "redis://127.0.0.1:6379/0"
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
NATS_URL = "nats://127.0.0.1:4222"
#: The stream, queue or topic the bench publishes to, emptied before and removed after each run:
#: two benches on one broker need names of their own (the environment reaches the publishers'
#: processes as well).
TOPIC = os.environ.get("OUTBOX_BENCH_TOPIC", "outbox-bench")
NATS_STREAM = TOPIC.replace("-", "_").replace(".", "_")

#: Each broker's backend and OPTIONS, and the topic it publishes to.
BROKERS: dict[str, tuple[str, dict[str, Any], str]] = {
    "memory": ("django_outbox.relay.brokers.memory.InMemoryBroker", {}, TOPIC),
    "redis": ("django_outbox.relay.brokers.redis.RedisStreams", {"url": REDIS_URL}, TOPIC),
    "rabbitmq": ("django_outbox.relay.brokers.rabbitmq.RabbitMQ", {"url": RABBITMQ_URL}, TOPIC),
    "nats": (
        "django_outbox.relay.brokers.nats.NatsJetStream",
        {"servers": [NATS_URL]},
        f"{NATS_STREAM}.events",
    ),
    "kafka": (
        "django_outbox.relay.brokers.kafka.Kafka",
        {"config": {"test.mock.num.brokers": 1, "linger.ms": 2}},
        TOPIC,
    ),
}

#: Confirm times by message id, written by ``Timed``.
_confirmed: dict[uuid.UUID, float] = {}


class Timed(Broker):
    """A broker that notes when each message was confirmed (OPTIONS: ``inner``, its class,
    and ``inner_options``)."""

    def __init__(self, name: str, *, inner: str, inner_options: dict[str, Any]) -> None:
        super().__init__(name)
        self.inner: Broker = import_string(inner)(name, **inner_options)

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        outcomes = self.inner.publish(messages)
        now = time.monotonic()
        for message in messages:
            _confirmed[message.id] = now
        return outcomes

    def close(self) -> None:
        self.inner.close()


@contextmanager
def destination(name: str) -> Iterator[None]:
    """Create the bench's stream or queue on ``name``'s broker, empty; remove it after."""
    if name == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        client.delete(TOPIC)
        try:
            yield
        finally:
            client.delete(TOPIC)
            client.close()
    elif name == "rabbitmq":
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
        channel = connection.channel()
        channel.queue_delete(TOPIC)
        channel.queue_declare(TOPIC, durable=True)
        connection.close()
        try:
            yield
        finally:
            # A new connection: the first one would have missed its heartbeats meanwhile.
            connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
            connection.channel().queue_delete(TOPIC)
            connection.close()
    elif name == "nats":
        import asyncio

        import nats

        loop = asyncio.new_event_loop()
        nats_client = loop.run_until_complete(nats.connect(NATS_URL))
        jetstream = nats_client.jetstream()

        async def recreate() -> None:
            with contextlib.suppress(Exception):  # No such stream yet.
                await jetstream.delete_stream(NATS_STREAM)
            await jetstream.add_stream(name=NATS_STREAM, subjects=[f"{NATS_STREAM}.>"])

        loop.run_until_complete(recreate())
        try:
            yield
        finally:
            loop.run_until_complete(jetstream.delete_stream(NATS_STREAM))
            loop.run_until_complete(nats_client.close())
            loop.close()
    else:
        yield


def _settings(name: str, *, timed: bool = False, batch: int = 500) -> dict[str, Any]:
    backend, options, _topic = BROKERS[name]
    if timed:
        options = {"inner": backend, "inner_options": options}
        backend = "outbox_bench.relay.Timed"
    outbox = _user_outbox()
    outbox["BROKERS"] = {"default": {"BACKEND": backend, "OPTIONS": options}}
    outbox["RELAY"] = {"BATCH_SIZE": batch}
    return outbox


def _user_outbox() -> dict[str, Any]:
    from django.conf import settings

    return dict(getattr(settings, "OUTBOX", {}))


def _envelopes(topic: str, count: int, keys: int | None) -> list[Envelope]:
    from django_outbox.relay.ids import uuid7

    body = json.dumps({"order_id": 12345, "total": "99.90", "note": "x" * 100})
    return [
        Envelope(
            id=uuid7(),
            topic=topic,
            key=None if keys is None else f"order-{n % keys}",
            type="OrderPlaced",
            body=body,
            broker="default",
        )
        for n in range(count)
    ]


def floor(name: str, count: int, batch: int) -> float:
    """Messages per second the adapter alone publishes, in batches of ``batch``."""
    backend, options, topic = BROKERS[name]
    broker: Broker = import_string(backend)("default", **options)
    envelopes = _envelopes(topic, count, None)
    try:
        broker.publish(envelopes[:batch])  # Connects, creates the topic: not timed.
        started = time.perf_counter()
        for start in range(batch, count, batch):
            outcomes = broker.publish(envelopes[start : start + batch])
            assert all(outcome is None for outcome in outcomes), outcomes[:3]
        return (count - batch) / (time.perf_counter() - started)
    finally:
        broker.close()


def fresh_table() -> None:
    """Empty the message table, and on PostgreSQL vacuum it: every run starts from the table
    autovacuum keeps, not from the dead rows of the runs before (on a server whose autovacuum is
    off or behind, they slowed each claim down run after run)."""
    Message.objects.all().delete()
    connection = connections[get_settings().database]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Message._meta.db_table}")


def relay_rate(name: str, count: int, batch: int, keys: int | None) -> float:
    """Messages per second one relay drains, committed at once while it waits, connected."""
    _backend, _options, topic = BROKERS[name]
    with override_settings(OUTBOX=_settings(name, batch=batch)):
        payload = {"order_id": 12345, "total": "99.90", "note": "x" * 100}
        fresh_table()
        # The relay as workers run it: a thread that records each batch while it sends the
        # next. It first relays one message, untimed: it connects to the broker then (the
        # Kafka client starts librdkafka's mock cluster: 0.6 s), as the floor's first batch
        # does; a relay connects once in its life, not per backlog.
        relay = Relay(housekeeping=False)
        thread = threading.Thread(target=relay.run, daemon=True)
        thread.start()
        publish(topic, payload)
        _wait_for(relay, 1, thread)
        # Then the backlog, committed at once, and drained from its commit on.
        commit_backlog(topic, count, keys)
        started = time.perf_counter()
        relay.wake()
        _wait_for(relay, 1 + count, thread)
        elapsed = time.perf_counter() - started
        relay.request_stop()
        thread.join(30)
        close_brokers()
        assert not Message.objects.exists()
        return (relay.stats.sent - 1) / elapsed


def commit_backlog(topic: str, count: int, keys: int | None) -> None:
    """``count`` messages in one transaction: without keys, or spread over ``keys`` keys."""
    payload = {"order_id": 12345, "total": "99.90", "note": "x" * 100}
    with transaction.atomic(using=get_settings().database):
        if keys is None:
            for start in range(0, count, 1000):
                publish_many(topic, [payload] * min(1000, count - start))
        else:
            for key in range(keys):
                publish_many(topic, [payload] * (count // keys), key=f"order-{key}")


def relay_processes_rate(
    name: str, count: int, batch: int, keys: int | None, processes: int
) -> float:
    """Messages per second ``processes`` relays drain together, each in a process of its own
    (as ``run_outbox_worker --relay-only --processes N`` runs them): from the backlog's commit
    to its last message deleted. One process's relay shares one interpreter between decoding
    its claims and encoding the broker's requests; more processes share the work."""
    _backend, _options, topic = BROKERS[name]
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    ready = [spawn.Event() for _ in range(processes)]
    with override_settings(OUTBOX=_settings(name, batch=batch)):
        fresh_table()
        children = [
            spawn.Process(target=relay_until_stopped, args=(name, batch, stop, event))
            for event in ready
        ]
        for child in children:
            child.start()
        try:
            for event in ready:
                if not event.wait(60):
                    raise RuntimeError("a relay process did not start in 60 s")
            commit_backlog(topic, count, keys)
            started = time.perf_counter()
            pending = Message.objects.all()
            while pending.exists():
                if any(child.exitcode not in (None, 0) for child in children):
                    raise RuntimeError("a relay process failed")
                time.sleep(0.005)
            elapsed = time.perf_counter() - started
        finally:
            stop.set()
            for child in children:
                child.join(30)
        close_brokers()
    return count / elapsed


def _wait_for(relay: Relay, sent: int, thread: threading.Thread) -> None:
    while relay.stats.sent < sent and thread.is_alive():
        time.sleep(0.002)


def latency(name: str, rate: float, seconds: float, publishers: int) -> dict[str, float]:
    """Commit-to-confirm milliseconds (p50, p99, max) at ``rate`` messages a second, committed
    one per transaction by ``publishers`` threads, 4 to a process, none of them the relay's (as
    web processes commit side by side: in the relay's process, they took turns with it for the
    interpreter)."""
    _confirmed.clear()
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    with override_settings(OUTBOX=_settings(name, timed=True)):
        fresh_table()
        relay = Relay(housekeeping=False)
        thread = threading.Thread(target=relay.run, daemon=True)
        thread.start()
        # One message first, untimed: the relay connects to the broker for it (the Kafka
        # client starts librdkafka's mock cluster: 0.6 s, which the first messages waited).
        publish(BROKERS[name][2], {"n": -1})
        _wait_for(relay, 1, thread)
        _confirmed.clear()
        # Time for the process to start and set Django up, before its first message.
        start_at = time.monotonic() + 5.0
        # Processes of 4 threads each: one process's interpreter managed about 400 commits a
        # second here, whatever its threads.
        processes = [
            spawn.Process(
                target=publish_steadily,
                args=(name, rate / count, seconds, 4, start_at + number / rate, results),
            )
            for count in [max(1, publishers // 4)]
            for number in range(count)
        ]
        for process in processes:
            process.start()
        received: list[list[tuple[str, float]]] = []
        while len(received) < len(processes):
            try:
                received.append(results.get(timeout=1.0))
            except queue.Empty:
                if any(process.exitcode not in (None, 0) for process in processes):
                    raise RuntimeError("a publishers' process failed") from None
        committed = {uuid.UUID(hex_id): at for part in received for hex_id, at in part}
        for process in processes:
            process.join(30)
        elapsed = max(at for at in committed.values()) - start_at
        deadline = time.monotonic() + 30
        while len(_confirmed) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.05)
        relay.request_stop()
        thread.join(30)
    samples = sorted(
        (_confirmed[message_id] - at) * 1000
        for message_id, at in committed.items()
        if message_id in _confirmed
    )
    lost = len(committed) - len(samples)
    assert not lost, f"{lost} messages were not confirmed within 30 s"

    def percentile(fraction: float) -> float:
        return samples[min(len(samples) - 1, int(fraction * len(samples)))]

    return {
        "messages": len(samples),
        # What the publishers reached: below ``rate`` when commits were slower than its pace.
        "achieved_rate": len(samples) / elapsed,
        "p50_ms": percentile(0.50),
        "p99_ms": percentile(0.99),
        "max_ms": samples[-1],
    }


def idle_cost(name: str, seconds: float) -> float:
    """Statements per second an idle relay runs (after its first second)."""
    counted: list[Any] = []
    with override_settings(OUTBOX=_settings(name)):
        Message.objects.all().delete()
        relay = Relay()

        def run() -> None:
            connection = connections[get_settings().database]
            connection.force_debug_cursor = True
            counted.append(connection)
            try:
                relay.run()
            finally:
                connection.force_debug_cursor = False

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        time.sleep(1.0)
        before = len(counted[0].queries_log)
        time.sleep(seconds)
        after = len(counted[0].queries_log)
        relay.request_stop()
        thread.join(10)
    return (after - before) / seconds


def run_relay_bench(
    brokers: Sequence[str],
    *,
    messages: int,
    batch: int,
    keys: int,
    latency_rate: float,
    latency_seconds: float,
    latency_publishers: int,
    idle_seconds: float,
    log: Callable[[str], None],
    relay_processes: int = 1,
) -> dict[str, Any]:
    vendor = connections[get_settings().database].vendor
    results: dict[str, Any] = {
        "database": vendor,
        "brokers": {},
        "relay_processes": relay_processes,
    }
    for name in brokers:
        with destination(name):
            figures: dict[str, Any] = {}
            figures["floor"] = floor(name, messages, batch)
            log(f"{name}: floor {figures['floor']:,.0f}/s")
        with destination(name):
            figures["relay_keyless"] = relay_rate(name, messages, batch, None)
            log(f"{name}: relay keyless {figures['relay_keyless']:,.0f}/s")
        with destination(name):
            figures["relay_keyed"] = relay_rate(name, messages, batch, keys)
            log(f"{name}: relay {keys} keys {figures['relay_keyed']:,.0f}/s")
        figures["ratio_keyless"] = figures["relay_keyless"] / figures["floor"]
        figures["ratio_keyed"] = figures["relay_keyed"] / figures["floor"]
        if relay_processes > 1:
            for keyed, label in ((None, "keyless"), (keys, "keyed")):
                with destination(name):
                    rate = relay_processes_rate(name, messages, batch, keyed, relay_processes)
                figures[f"relays_{label}"] = rate
                figures[f"ratio_relays_{label}"] = rate / figures["floor"]
                log(f"{name}: {relay_processes} relay processes, {label} {rate:,.0f}/s")
        if latency_seconds > 0:
            with destination(name):
                figures["latency"] = latency(
                    name, latency_rate, latency_seconds, latency_publishers
                )
            log(f"{name}: latency {figures['latency']}")
        results["brokers"][name] = figures
    if idle_seconds > 0:
        results["idle_statements_per_second"] = idle_cost("memory", idle_seconds)
        log(f"idle: {results['idle_statements_per_second']:.2f} statements/s")
    return results


def format_relay_table(results: dict[str, Any]) -> str:
    lines = [
        f"Relay on {results['database']}",
        f"{'broker':<10} {'floor/s':>10} {'keyless/s':>10} {'ratio':>6} {'keyed/s':>10} "
        f"{'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'at/s':>6}",
    ]
    for name, figures in results["brokers"].items():
        latency_figures = figures.get("latency", {})
        lines.append(
            f"{name:<10} {figures['floor']:>10,.0f} {figures['relay_keyless']:>10,.0f} "
            f"{figures['ratio_keyless']:>6.2f} {figures['relay_keyed']:>10,.0f} "
            f"{figures['ratio_keyed']:>6.2f} {latency_figures.get('p50_ms', 0):>7.1f} "
            f"{latency_figures.get('p99_ms', 0):>7.1f} {latency_figures.get('max_ms', 0):>7.1f} "
            f"{latency_figures.get('achieved_rate', 0):>6,.0f}"
        )
    processes = results.get("relay_processes", 1)
    for name, figures in results["brokers"].items():
        if "relays_keyless" in figures:
            lines.append(
                f"{name}: {processes} relay processes: keyless {figures['relays_keyless']:,.0f}/s "
                f"({figures['ratio_relays_keyless']:.2f} of the floor), keyed "
                f"{figures['relays_keyed']:,.0f}/s ({figures['ratio_relays_keyed']:.2f})"
            )
    if "idle_statements_per_second" in results:
        lines.append(f"idle relay: {results['idle_statements_per_second']:.2f} statements/s")
    return "\n".join(lines)
