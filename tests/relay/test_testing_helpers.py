"""django_outbox.testing's helpers for messages, as a project's tests use them."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_outbox import publish
from django_outbox.testing import (
    assert_not_published,
    assert_published,
    drain_relay,
    published_messages,
    relayed_messages,
)

pytestmark = pytest.mark.usefixtures("memory_broker")


@pytest.mark.django_db
def test_assert_published_inside_the_tests_transaction_then_drain():
    with transaction.atomic():
        publish("users", {"id": 7}, key="user-7", type="UserSignedUp")
    assert_published("users", type="UserSignedUp", payload={"id": 7}, count=1)
    assert_not_published("users", type="UserDeleted")
    with pytest.raises(AssertionError, match="Expected 2 published message"):
        assert_published("users", count=2)
    assert drain_relay() == 1
    assert published_messages() == []
    ((envelope, payload),) = relayed_messages()
    assert (envelope.topic, envelope.key, envelope.type, payload) == (
        "users",
        "user-7",
        "UserSignedUp",
        {"id": 7},
    )


def test_the_outbox_fixture_has_the_message_helpers(outbox):
    publish("users", {"id": 1})
    outbox.assert_published("users", count=1)
    assert outbox.drain_relay() == 1
