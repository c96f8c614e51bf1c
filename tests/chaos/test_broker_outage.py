"""Fault injection on the relay: every broker down for long, with messages published throughout.

Two ``--relay-only`` processes relay to private brokers (tests/chaos/brokers.py): Redis and
NATS, and at full scale RabbitMQ too (a private node's boot costs seconds at CI size). Each is
SIGKILLed at once and kept down for 10 minutes at full scale (``OUTBOX_CHAOS_SCALE=full``), 6 s
at CI size, while the test publishes to each twice a second. (tests/relay/test_relay.py covers
an outage of a fraction of a second, on one relay in a thread, with the in-memory broker.)

All along the outage, no relay transaction outlives a claim: every so often another connection
takes the lock of every pending message row (PostgreSQL and MariaDB ``SELECT ... FOR UPDATE``,
SQLite ``BEGIN IMMEDIATE``) within ``LOCK_WAIT`` seconds, and on PostgreSQL no relay's
transaction is older than ``LONGEST_TRANSACTION`` (``pg_stat_activity``). Once the brokers are
back: every message delivered, each key's in order, none lost; every message sent without an
attempt spent (``RETENTION`` keeps the rows to look at); each relay logged each broker's outage
once (then a count a minute) and that it works again.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper

from django_outbox import Message, publish_many
from tests.chaos.brokers import BROKERS, PrivateBroker, check_ledger
from tests.chaos.outcomes import FULL, report, scaled
from tests.processes import WorkerProcess, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.process, pytest.mark.django_db(transaction=True)]

RELAYS = 2
BATCH = 50
# Long enough for a batch to meet each dead broker in turn: a relay sends a batch's messages
# broker by broker until half its lease has passed, and a dead NATS costs its 2 s timeout. (With
# a 2 s lease the dead NATS used the whole of it, and the dead Redis behind it was never tried.)
LEASE = 10
#: How long the lock probe waits for a row lock, and the oldest a relay's transaction may be
#: (seconds): a claim's, which is a statement or two, not an outage's.
LOCK_WAIT = 2
LONGEST_TRANSACTION = 2.0
#: Messages a broker gets each time, under one of ``KEYS`` keys.
PER_PUBLISH = 5
KEYS = 20


@pytest.fixture
def private_brokers(tmp_path: Path) -> Iterator[list[PrivateBroker]]:
    names = ["nats", "redis"] + (["rabbitmq"] if FULL else [])
    servers: list[PrivateBroker] = []
    try:
        for name in names:
            server_class = BROKERS[name]
            if not server_class.installed():
                pytest.skip(f"{server_class.program} is not installed (.ci/ensure-brokers)")
            directory = tmp_path / name
            directory.mkdir()
            servers.append(server_class(directory))
            servers[-1].start()
        yield servers
    finally:
        for server in servers:
            server.close()


class Publisher:
    """Publishes a few messages to each broker under a random key; keeps their ids in order."""

    def __init__(self, brokers: list[PrivateBroker]) -> None:
        self.brokers = brokers
        self.published: dict[str, list[str]] = {broker.name: [] for broker in brokers}
        self.rng = random.Random(24)

    def publish(self) -> None:
        for broker in self.brokers:
            ids = self.published[broker.name]
            sent = publish_many(
                broker.topic,
                [{"seq": len(ids) + n} for n in range(PER_PUBLISH)],
                key=f"key-{self.rng.randrange(KEYS)}",
                broker=broker.name,
            )
            ids += [str(message.id) for message in sent]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.published.values())


def lock_every_pending_message(other: BaseDatabaseWrapper) -> float:
    """Take the locks of every pending message row from ``other`` (the database's write lock on
    SQLite), waiting at most LOCK_WAIT seconds; return how long it took."""
    table = Message._meta.db_table
    began = time.monotonic()
    with other.cursor() as cursor:
        if other.vendor == "sqlite":
            # One lock for the whole database, taken by the statement that begins.
            cursor.execute(f"PRAGMA busy_timeout = {LOCK_WAIT * 1000}")
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute("ROLLBACK")
            return time.monotonic() - began
        if other.vendor == "postgresql":
            cursor.execute(f"SET lock_timeout = '{LOCK_WAIT}s'")
        else:
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT}")
        cursor.execute("BEGIN")
        try:
            cursor.execute(f"SELECT id FROM {table} WHERE status = 'pending' FOR UPDATE")
        finally:
            cursor.execute("ROLLBACK")
    return time.monotonic() - began


def oldest_transaction(other: BaseDatabaseWrapper) -> float:
    """The age of the oldest transaction another connection holds open (PostgreSQL; 0 elsewhere)."""
    if other.vendor != "postgresql":
        return 0.0
    with other.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        )
        return float(cursor.fetchone()[0])


def outage_logs(relay: WorkerProcess, relay_id: str, broker: str) -> dict[str, int]:
    """How often ``relay`` logged ``broker`` failing (the first error of a run), reminded that
    it still fails, and logged that it works again."""
    what = re.escape(f"publishing to broker {broker} relay={relay_id} ")
    return {
        kind: len(re.findall(what + pattern, relay.stderr))
        for kind, pattern in (
            ("failed", "failed: "),
            ("still_failing", "still failing "),
            ("works_again", "works again "),
        )
    }


def test_a_long_broker_outage_costs_no_attempt_and_holds_no_transaction_open(
    workers, private_brokers, second_connection, settings
):
    outage = scaled(6, 600)
    brokers = {
        broker.name: {"BACKEND": broker.backend, "OPTIONS": broker.options()}
        for broker in private_brokers
    }
    environment = {
        "OUTBOX_TEST_BROKERS": json.dumps(brokers),
        "OUTBOX_TEST_RELAY": json.dumps(
            # Sent messages are kept, marked sent: their attempts are looked at afterwards.
            {"BATCH_SIZE": BATCH, "LEASE_SECONDS": LEASE, "POLL_SECONDS": 0.1, "RETENTION": 86400}
        ),
    }
    settings.OUTBOX = {**settings.OUTBOX, "BROKERS": brokers}
    relay_ids = [f"relay-{number}" for number in range(RELAYS)]
    relays = [
        workers("--relay-only", "--worker-id", relay_id, **environment) for relay_id in relay_ids
    ]
    publisher = Publisher(private_brokers)

    # The relays at work before the outage.
    for _ in range(scaled(4, 20)):
        publisher.publish()
        time.sleep(0.5)
    wait_until(
        lambda: Message.objects.sent().exists(), timeout=60, what="the relays to send something"
    )

    for broker in private_brokers:
        broker.kill()
    down_at = time.monotonic()
    longest_transaction = slowest_lock = 0.0
    probes = 0
    last_probe = 0.0
    while time.monotonic() - down_at < outage:
        publisher.publish()
        longest_transaction = max(longest_transaction, oldest_transaction(second_connection))
        if time.monotonic() - last_probe >= 2:
            slowest_lock = max(slowest_lock, lock_every_pending_message(second_connection))
            last_probe = time.monotonic()
            probes += 1
        time.sleep(0.5)
    # An outage spends nothing: no message has an attempt counted, none is blocked.
    attempts_during = Message.objects.filter(attempts__gt=0).count()
    waiting_at_return = Message.objects.unsent().count()
    assert attempts_during == 0
    assert not Message.objects.blocked().exists()

    boot_times = [broker.start() for broker in private_brokers]
    back_at = time.monotonic()
    failed = {
        (relay_id, broker.name)
        for relay, relay_id in zip(relays, relay_ids, strict=True)
        for broker in private_brokers
        if outage_logs(relay, relay_id, broker.name)["failed"]
    }

    def every_relay_works_again() -> bool:
        publisher.publish()
        return all(
            outage_logs(relay, relay_id, name)["works_again"]
            for relay, relay_id in zip(relays, relay_ids, strict=True)
            for name in [name for relay_name, name in failed if relay_name == relay_id]
        )

    # Publishing goes on until each relay that saw a broker fail saw it work again: a relay
    # rests a broker up to 30 s after a failure, and a message must come its way after that.
    wait_until(every_relay_works_again, timeout=120, what="every relay to work again")
    wait_until(
        lambda: not Message.objects.unsent().exists(),
        timeout=scaled(120, 600),
        what="the relays to send every message",
    )
    delivered_in = time.monotonic() - back_at

    figures: dict[str, Any] = {}
    for broker in private_brokers:
        ledger = check_ledger(broker.ledger(), publisher.published[broker.name])
        figures[broker.name] = ledger
        assert ledger["lost"] == 0, broker.name
        assert ledger["order_violations"] == 0, broker.name
        # Only the batches in flight when the broker died are sent twice.
        assert ledger["duplicates"] <= RELAYS * BATCH, broker.name
        assert ledger["duplicate_effects"] == 0, broker.name
    logs = {
        f"{relay_id}/{broker.name}": outage_logs(relay, relay_id, broker.name)
        for relay, relay_id in zip(relays, relay_ids, strict=True)
        for broker in private_brokers
    }
    report(
        "relay_broker_outage",
        outage_s=outage,
        brokers=[broker.name for broker in private_brokers],
        messages=publisher.count,
        waiting_at_return=waiting_at_return,
        attempts=Message.objects.filter(attempts__gt=0).count(),
        longest_transaction_s=round(longest_transaction, 3),
        lock_probes=probes,
        slowest_lock_s=round(slowest_lock, 3),
        broker_start_s=[round(seconds, 1) for seconds in boot_times],
        delivered_in_s=round(delivered_in, 1),
        logs=logs,
        **figures,
    )
    # Every message sent (the rows kept), and not one attempt spent on any.
    assert Message.objects.sent().count() == publisher.count
    assert not Message.objects.filter(attempts__gt=0).exists()
    assert longest_transaction < LONGEST_TRANSACTION
    # Each broker's outage: the relays saw it, each logged it once, and each works again.
    assert {name for _relay_id, name in failed} == set(brokers)
    for (relay_id, name), counts in ((key, logs[f"{key[0]}/{key[1]}"]) for key in failed):
        assert counts["failed"] == 1, (relay_id, name, counts)
        assert counts["works_again"] == 1, (relay_id, name, counts)
    for relay in relays:
        assert relay.popen.poll() is None, f"a relay died:\n{relay.stderr}"
