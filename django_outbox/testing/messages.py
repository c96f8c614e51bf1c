"""Asserting what a test published, and relaying it in the test's own thread.

``published_messages()`` reads the messages waiting for the relay (in the test's transaction:
nothing needs to commit). ``drain_relay()`` runs the relay once through in the test's thread
and returns what it sent; with the in-memory broker (``OUTBOX["BROKERS"]`` naming
``django_outbox.relay.brokers.memory.InMemoryBroker``) ``relayed_messages()`` lists everything
it received.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..conf import get_settings
from ..envelope import Envelope
from ..models import Message
from ..relay.brokers import memory
from ..relay.loop import Relay
from .assertions import ANY


def published_messages(
    topic: str | None = None,
    *,
    key: Any = ANY,
    type: Any = ANY,
    payload: Any = ANY,
) -> list[Message]:
    """Return the unsent messages that match, oldest first (``key=None``: keyless ones)."""
    messages = Message.objects.using(get_settings().database).unsent().order_by("id")
    if topic is not None:
        messages = messages.filter(topic=topic)
    if key is not ANY:
        messages = messages.filter(key=key)
    if type is not ANY:
        messages = messages.filter(type=type)
    found = list(messages)
    if payload is not ANY:
        found = [message for message in found if message.payload == payload]
    return found


def assert_published(
    topic: str | None = None,
    *,
    key: Any = ANY,
    type: Any = ANY,
    payload: Any = ANY,
    count: int | None = None,
) -> list[Message]:
    """Assert that unsent messages match: ``count`` of them, or at least one. Return them."""
    found = published_messages(topic, key=key, type=type, payload=payload)
    if (count is None and not found) or (count is not None and len(found) != count):
        waiting = [
            (message.topic, message.key, message.type, message.payload)
            for message in published_messages()[:20]
        ]
        wanted = f"{count}" if count is not None else "at least 1"
        raise AssertionError(
            f"Expected {wanted} published message(s) matching topic={topic!r} "
            f"{_describe(key=key, type=type, payload=payload)}, found {len(found)}. Unsent "
            f"messages (topic, key, type, payload), up to 20: {waiting}"
        )
    return found


def assert_not_published(
    topic: str | None = None,
    *,
    key: Any = ANY,
    type: Any = ANY,
    payload: Any = ANY,
) -> None:
    """Assert that no unsent message matches."""
    found = published_messages(topic, key=key, type=type, payload=payload)
    if found:
        raise AssertionError(
            f"Expected no published message matching topic={topic!r} "
            f"{_describe(key=key, type=type, payload=payload)}, found {len(found)}: "
            f"ids {[str(message.id) for message in found]}"
        )


def _describe(**fields: Any) -> str:
    return " ".join(f"{name}={value!r}" for name, value in fields.items() if value is not ANY)


def drain_relay(brokers: Sequence[str] = ()) -> int:
    """Relay every waiting message now, in this thread; return how many brokers confirmed."""
    return Relay(brokers=brokers, housekeeping=False).drain(timeout=5).sent


def relayed_messages(broker: str | None = None) -> list[tuple[Envelope, Any]]:
    """Return what the in-memory broker received: (envelope, decoded payload), in order."""
    return [(message, json.loads(message.body)) for message in memory.sent_messages(broker)]


def clear_relayed_messages() -> None:
    """Forget what the in-memory broker received."""
    memory.clear()
