"""The relay: claims, publishes with confirms, deletes what was confirmed, keeps key order."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from django_outbox import Message, MessageStatus, publish, publish_many
from django_outbox.db.message_sql import own_binds
from django_outbox.db.messages import claim_messages
from django_outbox.relay import outcomes
from django_outbox.relay.brokers import BrokerUnavailable, close_brokers, memory
from django_outbox.relay.loop import Relay
from tests.db.plans import mariadb_plan
from tests.processes import wait_until

from .conftest import MEMORY

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("memory_broker")]


def sent_payloads(broker: str = "default") -> list[Any]:
    return [json.loads(message.body) for message in memory.sent_messages(broker)]


def test_drain_publishes_every_committed_message_and_deletes_it():
    publish_many("orders", [{"n": n} for n in range(30)])
    stats = Relay(batch_size=7).drain()
    assert stats.sent == 30
    assert sorted(p["n"] for p in sent_payloads()) == list(range(30))
    assert not Message.objects.exists()


def test_the_envelope_carries_id_type_key_and_headers():
    message = publish("orders", {"n": 1}, key="o-1", type="OrderPlaced", headers={"trace": "t"})
    Relay().drain()
    (sent,) = memory.sent_messages("default")
    assert sent.id == message.id
    assert sent.all_headers() == {
        "trace": "t",
        "message-id": str(message.id),
        "message-type": "OrderPlaced",
        "message-key": "o-1",
    }


def test_a_key_keeps_its_order_and_keyless_messages_go_along():
    for n in range(20):
        publish("orders", {"key": n % 3, "n": n}, key=f"k{n % 3}")
        publish("orders", {"key": None, "n": n})
    Relay(batch_size=8).drain()
    sent = sent_payloads()
    assert len(sent) == 40
    for key in range(3):
        ns = [p["n"] for p in sent if p["key"] == key]
        assert ns == sorted(ns)


def test_a_claim_leaves_a_key_whose_earlier_message_another_relay_holds():
    publish("orders", {"n": 1}, key="k")
    publish("orders", {"n": 2}, key="k")
    publish("orders", {"n": 3})
    # Another relay claimed the first message only (its batch was full).
    _token, held = claim_messages(connection, ["default"], 1, 30)
    assert [json.loads(m.body) for m in held] == [{"n": 1}]
    _, claimed = claim_messages(connection, ["default"], 10, 30)
    # Not the key's second message while its first is in flight; the keyless one, yes.
    assert [m.key for m in claimed] == [None]


def test_a_permanent_refusal_blocks_only_its_key():
    outbox = {
        **settings.OUTBOX,
        "BROKERS": {"default": {"BACKEND": MEMORY, "OPTIONS": {"refuse_topics": ["bad"]}}},
    }
    with override_settings(OUTBOX=outbox):
        close_brokers()
        poison = publish("bad", {"n": 0}, key="k")
        behind = publish("bad", {"n": 1}, key="k")
        publish("good", {"n": 2}, key="k")  # Another topic: another key line.
        publish("good", {"n": 3}, key="other")
        stats = Relay().drain()
        assert stats.blocked == 1
        assert sorted(p["n"] for p in sent_payloads()) == [2, 3]
        blocked = Message.objects.get(pk=poison.pk)
        assert blocked.status == MessageStatus.BLOCKED
        assert blocked.attempts == 1
        assert "refused" in blocked.last_error
        # The message behind it waits, unsent and at no cost.
        waiting = Message.objects.get(pk=behind.pk)
        assert (waiting.status, waiting.attempts, waiting.lease_token) == ("pending", 0, None)
        # Skipping the blocked message (the admin's action) lets its key go on.
        Message.objects.filter(pk=poison.pk).delete()
        close_brokers()
    memory.clear()
    Relay().drain()
    assert sent_payloads() == [{"n": 1}]


def test_a_broker_outage_costs_no_attempt_and_holds_no_lease():
    publish_many("orders", [{"n": n} for n in range(5)], key="k")
    memory.set_available("default", False)
    with pytest.raises(BrokerUnavailable):
        Relay(poll_seconds=0.01).drain(timeout=0.3)
    rows = list(Message.objects.values_list("attempts", "lease_token", "status"))
    assert rows == [(0, None, "pending")] * 5
    memory.set_available("default", True)
    Relay().drain()
    assert [p["n"] for p in sent_payloads()] == list(range(5))


def test_a_relay_that_lost_its_lease_deletes_nothing():
    publish("orders", {"n": 1})
    token, _messages = claim_messages(connection, ["default"], 10, 30)
    # Its lease expired and another relay claimed the message again.
    Message.objects.update(lease_expires_at=None, lease_token=uuid.uuid4())
    from django_outbox.relay import outcomes

    assert outcomes.confirmed("default", token, [_messages[0].id], keep=False) == 0
    assert Message.objects.count() == 1


def test_retention_keeps_sent_messages_marked_sent():
    outbox = {**settings.OUTBOX, "RELAY": {"RETENTION": 3600}}
    outbox["BROKERS"] = {"default": {"BACKEND": MEMORY}}
    with override_settings(OUTBOX=outbox):
        publish("orders", {"n": 1})
        Relay().drain()
        (row,) = Message.objects.all()
        assert row.status == MessageStatus.SENT
        assert row.sent_at is not None
        assert Relay().drain().sent == 0


def test_the_relay_runs_in_a_thread_until_stopped_and_wakes_on_publish():
    relay = Relay(poll_seconds=5)
    thread = threading.Thread(target=relay.run)
    thread.start()
    try:
        publish("orders", {"n": 1})
        for _ in range(200):
            if memory.sent_messages("default"):
                break
            threading.Event().wait(0.01)
        # Well before the 5 s poll: woken by the publish (NOTIFY, or in-process on SQLite).
        assert sent_payloads() == [{"n": 1}]
    finally:
        relay.request_stop()
        thread.join(10)
    assert not thread.is_alive()


class GatedRelay:
    """A relay running on a thread of its own, whose outcome writes wait while ``gate`` is
    closed (each at most 30 s); ``claims`` lists how many messages each of its claims took."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from django_outbox.relay import loop

        self.gate = threading.Event()
        self.gate.set()
        self.claims: list[int] = []
        submit, claim = loop.OutcomeWriter.submit, loop.Relay._claim

        def gated_submit(writer: Any, record: Callable[[], None]) -> None:
            def gated() -> None:
                self.gate.wait(30)
                record()

            submit(writer, gated)

        def counted_claim(relay: Relay, **options: Any) -> Any:
            batch = claim(relay, **options)
            self.claims.append(len(batch.messages) if batch else 0)
            return batch

        monkeypatch.setattr(loop.OutcomeWriter, "submit", gated_submit)
        monkeypatch.setattr(loop.Relay, "_claim", counted_claim)
        self.relay = Relay(poll_seconds=30, housekeeping=False)
        self.thread = threading.Thread(target=self.relay.run)

    def __enter__(self) -> GatedRelay:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.gate.set()
        self.relay.request_stop()
        self.thread.join(10)
        assert not self.thread.is_alive()


def second_sent_its_outcome_held(gated: GatedRelay, key: str) -> int:
    """Send message 1 of ``key`` through ``gated``'s relay, then message 2 with the write of
    its outcome held (the gate closed until the test opens it); return the claims made so far."""
    publish("orders", {"n": 1}, key=key)
    wait_until(lambda: not Message.objects.exists())
    # From here, outcomes are written only when the gate opens.
    gated.gate.clear()
    publish("orders", {"n": 2}, key=key)
    wait_until(lambda: len(memory.sent_messages("default")) == 2)
    return len(gated.claims)


def test_a_message_behind_its_keys_unrecorded_last_one_is_sent_without_waiting_a_poll(
    monkeypatch,
):
    """A key's next message committed while its last one's confirmation is still being
    written: the claim it wakes leaves it (the key is held), and the relay looks again once the
    write is done instead of resting a poll with the message ready."""
    with GatedRelay(monkeypatch) as gated:
        seen = second_sent_its_outcome_held(gated, key="k")
        publish("orders", {"n": 3}, key="k")
        wait_until(lambda: len(gated.claims) > seen)
        assert gated.claims[seen] == 0, "the woken claim must find the key held"
        gated.gate.set()
        # Within seconds, not the 30 s poll.
        wait_until(lambda: len(memory.sent_messages("default")) == 3)
        assert sent_payloads() == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_an_idle_relay_waiting_for_its_last_write_claims_a_message_committed_meanwhile(
    monkeypatch,
):
    """An idle relay waits for its last batch's outcomes to be written before it rests (their
    keys' next messages may be ready then). A message committed meanwhile, of another key, is
    claimed and sent at once, not after the write: a slow write held the relay's every key (the
    test above failed so on MariaDB under load, its relay in this wait when it woke)."""
    with GatedRelay(monkeypatch) as gated:
        seen = second_sent_its_outcome_held(gated, key="a")
        # Woken, the relay claims nothing: idle, it waits for the write of message 2's outcome.
        gated.relay.wake()
        wait_until(lambda: len(gated.claims) > seen)
        publish("orders", {"n": 3}, key="b")
        wait_until(lambda: len(memory.sent_messages("default")) == 3, timeout=5)
        assert not gated.gate.is_set()
        assert sent_payloads() == [{"n": 1}, {"n": 2}, {"n": 3}]
        gated.gate.set()
        wait_until(lambda: not Message.objects.exists())


@pytest.mark.postgresql
def test_a_message_committed_before_the_listener_listens_is_sent_once_it_does(monkeypatch):
    """The relay's first look ran before its listener's LISTEN, and a message committed in
    between (its NOTIFY heard by no one): the listener's first LISTEN wakes the relay to look
    again, rather than leave the message to the idle relay's next look, seconds away."""
    from django_outbox.db.postgresql.queries import PostgreSQLQueries
    from django_outbox.relay import loop

    listening = threading.Event()
    claims: list[int] = []
    listen = PostgreSQLQueries.listen
    claim = loop.Relay._claim

    def late_listen(self, *args, **kwargs):
        listening.wait(10)
        return listen(self, *args, **kwargs)

    def counted_claim(self, **options):
        batch = claim(self, **options)
        claims.append(len(batch.messages) if batch else 0)
        return batch

    monkeypatch.setattr(PostgreSQLQueries, "listen", late_listen)
    monkeypatch.setattr(loop.Relay, "_claim", counted_claim)
    relay = Relay(poll_seconds=30, housekeeping=False)
    thread = threading.Thread(target=relay.run)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not claims and time.monotonic() < deadline:
            time.sleep(0.01)
        assert claims == [0]
        publish("orders", {"n": 1})
        listening.set()
        while not memory.sent_messages("default") and time.monotonic() < deadline:
            time.sleep(0.01)
        # Within seconds, not the 30 s poll.
        assert sent_payloads() == [{"n": 1}]
    finally:
        listening.set()
        relay.request_stop()
        thread.join(10)
    assert not thread.is_alive()


class OneAtATime(memory.InMemoryBroker):
    """An adapter that does not keep a key's order within a batch: it records its calls."""

    keeps_key_order = False
    calls: list[list[str | None]] = []

    def publish(self, messages):
        OneAtATime.calls.append([m.key for m in messages])
        return super().publish(messages)


def test_an_adapter_that_does_not_keep_key_order_gets_one_message_per_key_per_call():
    outbox = {
        **settings.OUTBOX,
        "BROKERS": {"default": {"BACKEND": f"{__name__}.OneAtATime"}},
    }
    OneAtATime.calls = []
    with override_settings(OUTBOX=outbox):
        close_brokers()
        for n in range(3):
            publish("orders", {"n": n}, key="a")
            publish("orders", {"n": n}, key="b")
        publish("orders", {"n": 9})
        Relay().drain()
        close_brokers()
    assert OneAtATime.calls == [["a", "b", None], ["a", "b"], ["a", "b"]]
    assert [p["n"] for p in sent_payloads() if p != {"n": 9}] == [0, 0, 1, 1, 2, 2]


@pytest.mark.postgresql
def test_during_a_broker_outage_the_relay_holds_no_transaction_open():
    """A relay that keeps failing to reach its broker stays out of transactions: vacuum and
    other relays are not held up, however long the outage lasts."""
    from django.db import connections

    publish_many("orders", [{"n": n} for n in range(20)], key="k")
    memory.set_available("default", False)
    relay = Relay(poll_seconds=0.02)
    thread = threading.Thread(target=relay.run)
    thread.start()
    try:
        deadline = time.monotonic() + 2
        with connections["default"].cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute(
                    "SELECT state, now() - xact_start FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND application_name NOT LIKE 'pg_%%' AND backend_type = 'client backend'"
                )
                for state, age in cursor.fetchall():
                    if state == "idle in transaction":
                        assert age.total_seconds() < 1, age
                time.sleep(0.01)
        # It did claim and hand back the batch, more than once, during the outage.
        assert relay.stats.released >= 20
    finally:
        relay.request_stop()
        thread.join(10)
        memory.set_available("default", True)
    rows = list(Message.objects.values_list("attempts", "lease_token"))
    assert rows == [(0, None)] * 20


def test_a_claim_behind_the_relays_own_batch_takes_that_batchs_keys_next_messages():
    """The relay claims its next batch while it sends one: its own batch does not hold the
    keys back (the relay sends it first); another relay's claim still leaves them."""
    publish("orders", {"n": 1}, key="k")
    publish("orders", {"n": 2}, key="k")
    token, first = claim_messages(connection, ["default"], 1, 30)
    assert [json.loads(m.body) for m in first] == [{"n": 1}]
    _, others = claim_messages(connection, ["default"], 10, 30)
    assert others == []
    _, behind = claim_messages(connection, ["default"], 10, 30, own=token)
    assert [json.loads(m.body) for m in behind] == [{"n": 2}]


def test_a_claim_behind_its_own_batch_still_leaves_keys_others_hold_whatever_their_token():
    """The key check reads the leases below and above the claiming relay's own token, and the
    messages without a lease, as three ranges: each kind of holder still holds its key."""
    for key in "abcd":
        publish_many("orders", [{"key": key, "n": n} for n in range(2)], key=key)
    own = uuid.UUID(int=1 << 127)
    holders = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=(1 << 128) - 1), "d": own}
    for key, token in holders.items():
        first = Message.objects.filter(key=key).order_by("id")[0]
        Message.objects.filter(pk=first.pk).update(
            lease_token=token, lease_expires_at=first.created_at + timedelta(hours=1)
        )
    blocked = Message.objects.filter(key="c").order_by("id")[0]
    Message.objects.filter(pk=blocked.pk).update(status=MessageStatus.BLOCKED)
    _, behind = claim_messages(connection, ["default"], 10, 30, own=own)
    assert [(m.key, json.loads(m.body)["n"]) for m in behind] == [("d", 1)]


def test_a_claim_behind_its_own_batch_reads_none_of_that_batchs_entries():
    """A key with more messages waiting than a batch: the claim behind the batch that holds
    the key's first ones passes over that batch's entries as a range, instead of reading all of
    them for each of its candidates (500 x 500 entries a claim: 55 to 93 ms against 7 to 10)."""
    publish_many("orders", [{"n": n} for n in range(400)], key="k")
    own, first = claim_messages(connection, ["default"], 200, 30)
    assert len(first) == 200
    sql, params = _pick_of(own)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            # Each of the 200 candidates' three probes found nothing, and read nothing to
            # throw away (before: 200 x 200 of the batch's entries, removed by the filter).
            assert plan.count("Index Scan using outbox_message_key_holds") == 3, plan
            assert "lease_token < " in plan, plan
            assert "lease_token > " in plan, plan
            lines = plan.splitlines()
            first_subplan = next(n for n, line in enumerate(lines) if line.strip() == "SubPlan 1")
            assert not any("Rows Removed by Filter" in line for line in lines[first_subplan:]), plan
        elif connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            for probe in ("lease_token<?", "lease_token>?", "lease_token=?"):
                assert f"outbox_message_key_holds (broker=? AND topic=? AND key=? AND {probe}" in (
                    plan
                ), plan
        else:
            # One probe on MariaDB, which reads the batch's entries (see message_sql).
            plan = mariadb_plan(cursor, sql, params)
            probes = [line for line in plan.splitlines() if "outbox_message_key_holds" in line]
            assert len(probes) == 1, plan
    _, behind = claim_messages(connection, ["default"], 500, 30, own=own)
    assert [json.loads(m.body)["n"] for m in behind] == list(range(200, 400))


@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's key index (migration 0025)")
def test_on_mariadb_the_key_check_reads_the_keys_holders_not_its_waiting_messages():
    """MariaDB has no partial indexes: the generated holds_key column stands for the partial
    index's condition, and the check reads past none of the key's waiting messages (before:
    each earlier one, and its row, for every candidate: 170 to 300 ms a claim of 500)."""
    publish_many("orders", [{"n": n} for n in range(300)], key="k")
    sql, params = _pick_of(uuid.UUID(int=0))
    with connection.cursor() as cursor:
        plan = mariadb_plan(cursor, sql, params, run=True)
    probes = [line for line in plan.splitlines() if "outbox_message_key_holds" in line]
    assert len(probes) == 1, plan
    assert float(probes[0].rsplit("rows=", 1)[1]) < 1, plan
    # The first message has no holder before it: it alone is claimed, and then holds the key.
    token, first = claim_messages(connection, ["default"], 500, 30)
    assert [json.loads(m.body)["n"] for m in first] == list(range(300))
    Message.objects.filter(lease_token=token).update(lease_token=None, lease_expires_at=None)
    Message.objects.filter(pk=first[0].id).update(status=MessageStatus.BLOCKED)
    assert claim_messages(connection, ["default"], 500, 30)[1] == []


def _pick_of(own: uuid.UUID) -> tuple[str, Any]:
    """The claim's pick behind the batch ``own``, in this database's dialect, and its params."""
    if connection.vendor == "postgresql":
        from django_outbox.db.postgresql.messages import _PICK

        return _PICK, {"brokers": ["default"], "own": own, "limit": 500}
    if connection.vendor == "sqlite":
        from django_outbox.db.sqlite.messages import _pick

        return _pick(1), ["default", *[own.hex] * own_binds(), 500]
    from django_outbox.db.mysql.messages import _pick as mysql_pick
    from django_outbox.db.mysql.messages import _token

    return mysql_pick(1), ["default", _token(connection, own), 500]


def test_a_claims_share_confirmed_in_full_is_deleted_by_its_range_and_token_only():
    """Deleting a claim's whole share by the range of its ids leaves the messages of that
    range that another claim holds."""
    publish_many("orders", [{"n": n} for n in range(6)])
    first, _ = claim_messages(connection, ["default"], 2, 30)
    other, _ = claim_messages(connection, ["default"], 2, 30)
    mine, _ = claim_messages(connection, ["default"], 2, 30)
    ids = sorted(Message.objects.values_list("pk", flat=True))
    # Hand the second claim's rows to the third's range: its token still fences them.
    Message.objects.filter(lease_token=other).update(lease_token=mine)
    Message.objects.filter(pk=ids[3]).update(lease_token=other)
    done = outcomes.confirmed_claim("default", mine, "default", ids[0], ids[-1], keep=False)
    assert done == 3
    assert sorted(Message.objects.values_list("pk", flat=True)) == [ids[0], ids[1], ids[3]]
    assert Message.objects.filter(lease_token=first).count() == 2


def run_until_sent(relay: Relay, count: int) -> None:
    thread = threading.Thread(target=relay.run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while relay.stats.sent + relay.stats.blocked < count and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        relay.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_running_relay_behind_a_backlog_keeps_each_keys_order():
    """Behind a backlog the relay claims each batch while it sends the one before: keys
    spread over every batch still reach the broker in order, each message once."""
    for n in range(300):
        publish("orders", {"key": n % 7, "n": n}, key=f"k{n % 7}")
        if n % 3 == 0:
            publish("orders", {"key": None, "n": n})
    run_until_sent(Relay(batch_size=20, housekeeping=False), 400)
    sent = sent_payloads()
    assert len(sent) == 400
    for key in range(7):
        ns = [p["n"] for p in sent if p["key"] == key]
        assert ns == sorted(ns) == list(range(key, 300, 7))
    assert not Message.objects.exists()


class RefusingOnceClaimedAhead(memory.InMemoryBroker):
    """Refuses topic "bad"; it answers the first batch only once the relay claimed the
    message ``behind`` ahead (the race the test is about, made certain)."""

    behind: uuid.UUID | None = None

    def publish(self, messages):
        if any(m.topic == "bad" for m in messages) and RefusingOnceClaimedAhead.behind:
            deadline = time.monotonic() + 10
            held = Message.objects.filter(pk=RefusingOnceClaimedAhead.behind).exclude(
                lease_token=None
            )
            while not held.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            RefusingOnceClaimedAhead.behind = None
        return super().publish(messages)


def test_a_batch_claimed_behind_a_refused_message_hands_back_its_keys_next_one():
    """A message of the key refused in one batch: its next message, claimed in the batch
    behind it, is not sent and costs nothing; it waits behind the refused one."""
    outbox = {
        **settings.OUTBOX,
        "BROKERS": {
            "default": {
                "BACKEND": f"{__name__}.RefusingOnceClaimedAhead",
                "OPTIONS": {"refuse_topics": ["bad"]},
            }
        },
    }
    with override_settings(OUTBOX=outbox):
        close_brokers()
        poison = publish("bad", {"n": 0}, key="k")
        publish_many("good", [{"n": n} for n in range(1, 10)])
        behind = publish("bad", {"n": 10}, key="k")
        publish_many("good", [{"n": n} for n in range(11, 40)])
        RefusingOnceClaimedAhead.behind = behind.id
        run_until_sent(Relay(batch_size=10, housekeeping=False), 39)
        close_brokers()
    assert sorted(p["n"] for p in sent_payloads()) == [n for n in range(1, 40) if n != 10]
    assert Message.objects.get(pk=poison.pk).status == MessageStatus.BLOCKED
    waiting = Message.objects.get(pk=behind.pk)
    assert (waiting.status, waiting.attempts) == (MessageStatus.PENDING, 0)
