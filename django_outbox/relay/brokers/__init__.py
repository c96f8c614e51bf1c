"""One adapter per message broker, behind one small interface: ``Broker``.

An adapter publishes a batch of messages and says, for each, whether the broker confirmed it
(``None``) or refused it (a ``Refusal``). It raises ``BrokerUnavailable`` when it cannot tell
(no connection, a timeout): the relay then hands the whole batch back without costing any
message an attempt, and tries again later. Adapters import their client library on first use,
so a project installs only the extras of the brokers it names (``pip install
django-outbox-queue[redis]``).

``OUTBOX["BROKERS"]`` names them: ``{"events": {"BACKEND": "django_outbox.relay.brokers.redis.
RedisStreams", "OPTIONS": {"url": "redis://localhost:6379/0"}}}``. ``broker_named`` builds one
adapter per name and thread (clients are not shared between threads).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.utils.module_loading import import_string

from ...conf import get_settings
from ...envelope import Envelope
from ...exceptions import OutboxError


class BrokerUnavailable(OutboxError):
    """The broker could not be reached, or did not answer in time: nothing is known to be sent."""


@dataclass(frozen=True)
class Refusal:
    """The broker refused one message: ``reason`` says why; ``permanent`` when sending it again
    cannot help (too large, unroutable, no such stream)."""

    reason: str
    permanent: bool = True


#: What ``publish`` says of each message: None when the broker confirmed it.
Outcome = Refusal | None

#: The outcome of a message an adapter did not send because an earlier message of its key in
#: the batch was refused: the relay hands it back at no cost, to wait behind that one.
NOT_SENT = Refusal("not sent: an earlier message of its key was refused", permanent=False)


class KeyStops:
    """The keys of a batch that an adapter stopped sending after a refusal."""

    def __init__(self) -> None:
        self._stopped: set[tuple[str, str]] = set()

    def stopped(self, message: Envelope) -> bool:
        return message.key is not None and (message.topic, message.key) in self._stopped

    def stop(self, message: Envelope) -> None:
        if message.key is not None:
            self._stopped.add((message.topic, message.key))


class Broker:
    """A client of one broker, publishing batches with confirms.

    Subclasses take their ``OPTIONS`` as keyword arguments and implement ``publish``. They may
    send a batch's messages concurrently.
    """

    #: Whether the adapter keeps the order of a key's messages within one batch: it sends them
    #: in order and, once one is refused, sends none of that key after it (``NOT_SENT``). If
    #: not, the relay hands it at most one message per key at a time (more round trips).
    keeps_key_order: ClassVar[bool] = False

    def __init__(self, name: str, **options: Any) -> None:
        self.name = name
        self.options = options

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        """Send ``messages``; return one outcome per message, in order, once the broker
        confirmed or refused each; raise BrokerUnavailable if that is not known."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection (the relay is stopping, or the broker failed)."""


def without_password(url: str) -> str:
    """Return ``url`` with its password masked, for error messages and logs."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


_local = threading.local()


def broker_named(name: str) -> Broker:
    """Return this thread's adapter for the broker ``name`` of ``OUTBOX["BROKERS"]``."""
    brokers: dict[str, tuple[dict[str, Any], Broker]] = getattr(_local, "brokers", None) or {}
    _local.brokers = brokers
    entry = get_settings().brokers[name]
    known = brokers.get(name)
    if known is not None and known[0] is entry:
        return known[1]
    if known is not None:
        known[1].close()
    broker_class = import_string(entry["BACKEND"])
    broker: Broker = broker_class(name, **entry.get("OPTIONS", {}))
    brokers[name] = (entry, broker)
    return broker


def close_brokers() -> None:
    """Close this thread's adapters."""
    brokers: dict[str, tuple[dict[str, Any], Broker]] = getattr(_local, "brokers", None) or {}
    for _entry, broker in brokers.values():
        # Closing a broken client may fail in any way; it is dropped anyway.
        with contextlib.suppress(Exception):
            broker.close()
    brokers.clear()
