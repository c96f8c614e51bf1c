"""The relay's claim of messages, the one statement about them that differs by database.

A claim takes up to ``limit`` pending messages of the given brokers in id order, leaving
messages whose lease is held, whose retry is not due, and every message of a key (per broker
and topic) behind an earlier one of that key that is held, blocked or waiting for its retry:
so a key's messages leave one relay at a time, in order. Keyless messages are taken as they
come. Each claim gives its messages one new lease token, which fences the writes
that follow (``django_outbox.relay.outcomes``).

PostgreSQL (``postgresql.messages``) serializes claims with a transaction-level advisory lock:
two claims running side by side would each see the other's picks as free (the key check reads
the claim's snapshot), and could send a key's later message while an earlier one is in
flight. A claim is a few milliseconds; relays spend their time waiting for brokers, not here.
SQLite runs the claim as one UPDATE (``sqlite.messages``), which holds the only write lock for
its run; MariaDB (``mysql.messages``) waits on a row lock, then reads, updates and reads back.
The SQL they share is in ``message_sql``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..envelope import Envelope
from . import queries_for
from .message_sql import NO_TOKEN, MessageQueries

#: The channel PostgreSQL's trigger announces committed messages on (migration 0015).
CHANNEL = "django_outbox_relay"


_VENDORS: dict[str, MessageQueries] = {}


def _queries(connection: BaseDatabaseWrapper) -> MessageQueries:
    if not _VENDORS:
        from .mysql.messages import MySQLMessageQueries
        from .postgresql.messages import PostgreSQLMessageQueries
        from .sqlite.messages import SQLiteMessageQueries

        _VENDORS.update(
            postgresql=PostgreSQLMessageQueries(),
            sqlite=SQLiteMessageQueries(),
            mysql=MySQLMessageQueries(),
        )
    # queries_for() refuses a database django-outbox does not support, with the reason.
    vendor = queries_for(connection).vendor
    if vendor not in _VENDORS:
        raise NotImplementedError(
            f"The relay supports PostgreSQL, SQLite and MariaDB; database {connection.alias!r} is "
            f"{connection.display_name}. Publish on one of those, or run jobs that publish."
        )
    return _VENDORS[vendor]


def messages_waiting(connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
    """Whether a claim would find a message of ``brokers`` now."""
    return _queries(connection).waiting(connection, brokers)


def claim_messages(
    connection: BaseDatabaseWrapper,
    brokers: Sequence[str],
    limit: int,
    lease_seconds: float,
    *,
    own: uuid.UUID | None = None,
) -> tuple[uuid.UUID, list[Envelope]]:
    """Claim up to ``limit`` messages of ``brokers``; return the lease token and the messages
    in id order (a key's in the order they must be sent).

    ``own``: the lease token of the batch this relay is sending meanwhile. Its messages do not
    hold their keys back: this batch may hold their keys' next messages, which the relay must
    send only after them, and not at all behind one that was not confirmed.
    """
    token = uuid.uuid4()
    rows = _queries(connection).claim(
        connection, brokers, limit, lease_seconds, token, own=own or NO_TOKEN
    )
    envelopes = _envelopes(rows)
    # By the ids' integers: compared as UUIDs, each comparison is a Python call.
    envelopes.sort(key=lambda envelope: envelope.id.int)
    return token, envelopes


def settle_messages(
    connection: BaseDatabaseWrapper, token: uuid.UUID, ids: Sequence[uuid.UUID], *, keep: bool
) -> int:
    """Delete the confirmed messages ``ids`` (mark them sent, with ``keep``) that still carry
    ``token``; return how many did (fewer: the lease was lost, and another relay has them)."""
    return _queries(connection).settle(connection, token, ids, keep=keep)


def settle_claim(
    connection: BaseDatabaseWrapper,
    token: uuid.UUID,
    broker: str,
    first: uuid.UUID,
    last: uuid.UUID,
    *,
    keep: bool,
) -> int:
    """Delete (mark sent, with ``keep``) every message of ``broker`` from ``first`` to
    ``last`` that still carries ``token``: a claim's share the broker confirmed in full, found
    by one range of the primary key instead of an id at a time; return how many."""
    return _queries(connection).settle_claim(connection, token, broker, first, last, keep=keep)


def _envelopes(rows: Sequence[Sequence[Any]]) -> list[Envelope]:
    """The claimed rows as envelopes: one comprehension, positional arguments (a claim builds
    hundreds; a call per row and keyword arguments cost more than the rest of the decoding)."""
    return [
        Envelope(
            message_id if isinstance(message_id, uuid.UUID) else uuid.UUID(message_id),
            topic,
            key,
            type_,
            payload if payload is not None else "null",
            broker,
            # Most messages have none: no parse for those.
            json.loads(headers) if headers and headers != "{}" else {},
            attempts,
        )
        for message_id, topic, key, type_, headers, payload, broker, attempts in rows
    ]
