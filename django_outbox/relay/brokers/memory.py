"""A broker in this process's memory, for tests: what the relay sent, in order, by broker name.

``django_outbox.testing`` reads it (``published_messages()``); ``OPTIONS``: ``refuse_topics``
(a list of topics it refuses for good, to try blocked keys) and ``unavailable`` (True: every
publish fails as an outage would).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ...envelope import Envelope
from . import NOT_SENT, Broker, BrokerUnavailable, KeyStops, Outcome, Refusal

_lock = threading.Lock()
#: Broker name -> every message it accepted, in the order it accepted them.
_sent: dict[str, list[Envelope]] = {}
#: Broker names that fail every publish until ``set_available`` (an outage, in tests).
_down: set[str] = set()


class InMemoryBroker(Broker):
    """Keep each published message in a list of this process, in order."""

    keeps_key_order = True

    def __init__(
        self,
        name: str,
        *,
        refuse_topics: Sequence[str] = (),
        unavailable: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.refuse_topics = frozenset(refuse_topics)
        self.unavailable = unavailable

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        with _lock:
            if self.unavailable or self.name in _down:
                raise BrokerUnavailable(f"broker {self.name!r} is down (in-memory broker)")
            outcomes: list[Outcome] = []
            sent = _sent.setdefault(self.name, [])
            stops = KeyStops()
            for message in messages:
                if stops.stopped(message):
                    outcomes.append(NOT_SENT)
                elif message.topic in self.refuse_topics:
                    stops.stop(message)
                    outcomes.append(Refusal(f"topic {message.topic!r} is refused"))
                else:
                    sent.append(message)
                    outcomes.append(None)
            return outcomes


def sent_messages(broker: str | None = None) -> list[Envelope]:
    """Return the messages accepted so far, by ``broker`` (every broker's when None)."""
    with _lock:
        if broker is not None:
            return list(_sent.get(broker, []))
        return [message for messages in _sent.values() for message in messages]


def clear() -> None:
    """Forget every message accepted so far."""
    with _lock:
        _sent.clear()


def set_available(broker: str, available: bool) -> None:
    """Make ``broker`` fail every publish (an outage) or work again."""
    with _lock:
        if available:
            _down.discard(broker)
        else:
            _down.add(broker)
