"""publish(): checked before the INSERT, written in the caller's transaction."""

from __future__ import annotations

import datetime
import re
import uuid

import pytest
from django.db import connection, transaction
from django.test import override_settings

from django_outbox import Message, PayloadError, PublishError, publish, publish_many
from django_outbox.relay.ids import uuid7

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("memory_broker")]


def test_a_message_is_written_with_a_time_ordered_id():
    first = publish("orders", {"id": 1}, key="order-1", type="OrderPlaced", headers={"a": "b"})
    second = publish("orders", {"id": 2}, key="order-1")
    assert first.id.version == 7
    assert first.id < second.id
    stored = Message.objects.get(pk=first.pk)
    assert (stored.topic, stored.key, stored.type, stored.headers, stored.payload) == (
        "orders",
        "order-1",
        "OrderPlaced",
        {"a": "b"},
        {"id": 1},
    )
    assert stored.broker == "default"
    assert stored.status == "pending"


def test_a_rolled_back_transaction_takes_its_messages_with_it():
    def publish_and_fail():
        with transaction.atomic():
            publish("orders", {"id": 1})
            raise RuntimeError

    with pytest.raises(RuntimeError):
        publish_and_fail()
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: publish("", {}), "topic must be a non-empty string"),
        (lambda: publish("t", {}, key=""), "key must be a non-empty string or None"),
        (lambda: publish("t", {}, key="k" * 256), "key must be at most 255"),
        (lambda: publish("t", {}, headers={"a": 1}), "headers must map"),  # type: ignore[dict-item]
        (lambda: publish("t", {}, broker="nowhere"), "is not in OUTBOX['BROKERS']"),
        (lambda: publish("t", {"at": datetime.date(2026, 1, 1)}), "isoformat"),
        (lambda: publish("t", {"text": "a\x00b"}), "NUL"),
        (lambda: publish("t", float("nan")), "Out of range float"),
        (lambda: publish("t", "x" * (1024 * 1024 + 1)), "at most"),
        (lambda: publish_many("t", {"a": 1}), "a list of payloads"),
    ],
)
def test_bad_input_is_refused_before_the_insert_and_the_transaction_stays_usable(call, error):
    with transaction.atomic():
        with pytest.raises((PublishError, PayloadError), match=re.escape(error)):
            call()
        # The caller's transaction is still usable: no statement failed inside it.
        publish("orders", {"ok": True})
    assert list(Message.objects.values_list("payload", flat=True)) == [{"ok": True}]


def test_publish_many_writes_every_payload_in_order_in_one_insert():
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        messages = publish_many("orders", [{"n": n} for n in range(50)], key="k")
    inserts = [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    stored = Message.objects.order_by("id").values_list("payload", flat=True)
    assert list(stored) == [{"n": n} for n in range(50)]


def test_no_broker_configured_is_a_clear_error():
    with override_settings(OUTBOX={}), pytest.raises(PublishError, match="No broker is configured"):
        publish("orders", {})


def test_uuid7_ids_increase_strictly_within_a_process():
    ids = [uuid7() for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(value.version == 7 and value.variant == uuid.RFC_4122 for value in ids[:10])
