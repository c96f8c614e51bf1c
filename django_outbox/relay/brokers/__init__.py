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
from typing import Any

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


class Broker:
    """A client of one broker, publishing batches with confirms.

    Subclasses take their ``OPTIONS`` as keyword arguments and implement ``publish``. They keep
    a batch's order for messages of one key, and may send a batch's messages concurrently.
    """

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
