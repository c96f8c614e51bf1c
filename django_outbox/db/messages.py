"""The relay's claim of messages, the one statement about them that differs by database.

A claim takes up to ``limit`` pending messages of the given brokers in id order, leaving
messages whose lease is held, whose retry is not due, and every message of a key (per broker
and topic) behind an earlier one of that key that is held, blocked or waiting for its retry:
so a key's messages leave one relay at a time, in order. Keyless messages are
taken as they come. Each claim gives its messages one new lease token, which fences the writes
that follow (``django_outbox.relay.outcomes``).

PostgreSQL serializes claims with a transaction-level advisory lock: two claims running side by
side would each see the other's picks as free (the key check reads the claim's snapshot), and
could send a key's later message while an earlier one is in flight. A claim is a few
milliseconds; relays spend their time waiting for brokers, not here. SQLite runs the claim as
one UPDATE, which holds the only write lock for its run. MariaDB serializes claims with a row
lock (the enqueuers' lock table, ``serialize_enqueuers``), then reads, updates and reads back
the claimed rows (no UPDATE ... RETURNING there), in one transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..envelope import Envelope
from ..models import Message, MessageStatus
from . import queries_for

TABLE = Message._meta.db_table

_CANDIDATES = """
    SELECT id FROM {table} AS m
    WHERE status = '{pending}' AND broker {in_brokers}
      AND (lease_expires_at IS NULL OR lease_expires_at < {now})
      AND (available_at IS NULL OR available_at <= {now})
      AND (m.key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {table} AS earlier
          WHERE earlier.broker = m.broker AND earlier.topic = m.topic AND earlier.key = m.key
            AND earlier.id < m.id
            -- The condition of the key_holds index, as it is written there: the check reads
            -- that index (SQLite matches a partial index's condition term by term).
            AND earlier.key IS NOT NULL
            AND (earlier.lease_token IS NOT NULL OR earlier.status = '{blocked}'
                 OR earlier.available_at IS NOT NULL)
            AND (earlier.status = '{blocked}'
                 OR earlier.lease_expires_at >= {now}
                 OR earlier.available_at > {now})))
    ORDER BY id
    LIMIT {limit}
"""

#: The class of the advisory lock that serializes claims (the job enqueuers' is "obox").
CLAIM_LOCK_CLASS = int.from_bytes(b"obrl", "big") & 0x7FFFFFFF

POSTGRESQL_CLAIM_SQL = (
    "WITH picked AS ("
    + _CANDIDATES.format(
        table=TABLE,
        pending=MessageStatus.PENDING,
        blocked=MessageStatus.BLOCKED,
        in_brokers="= ANY(%(brokers)s)",
        now="statement_timestamp()",
        limit="%(limit)s",
    )
    + f""" FOR UPDATE)
UPDATE {TABLE} AS claimed
SET lease_token = %(token)s,
    lease_expires_at = statement_timestamp() + %(lease)s * interval '1 second',
    available_at = NULL
FROM picked WHERE claimed.id = picked.id
RETURNING claimed.id, claimed.topic, claimed.key, claimed.type, claimed.headers::text,
          claimed.payload::text, claimed.broker, claimed.attempts
"""
)

# Django stores SQLite datetimes as UTC text in this shape; ids and tokens as 32 hex digits.
_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

SQLITE_CLAIM_SQL = f"""
UPDATE {TABLE}
SET lease_token = ?, lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?),
    available_at = NULL
WHERE id IN ({{candidates}})
RETURNING id, topic, key, type, headers, payload, broker, attempts
"""


#: The channel PostgreSQL's trigger announces committed messages on (migration 0015).
CHANNEL = "django_outbox_relay"


def messages_waiting(connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
    """Whether a claim would find a message now: one read, no lock, for idle relays."""
    queries = queries_for(connection)
    params: Any
    if queries.vendor == "postgresql":
        sql = "SELECT EXISTS (" + _candidates_sql("postgresql", 1) + ")"
        params = {"brokers": list(brokers)}
    elif queries.vendor == "mysql":
        sql = "SELECT EXISTS (" + _candidates_sql("mysql", len(brokers)) + ")"
        params = [*brokers, 1]
    else:
        sql = "SELECT EXISTS (" + _candidates_sql("sqlite", len(brokers)) + ")"
        params = [*brokers, 1]
    _, rows = queries.execute(connection, sql, params)
    return bool(rows[0][0])


def _candidates_sql(vendor: str, brokers: int) -> str:
    if vendor == "postgresql":
        in_brokers, now, limit = "= ANY(%(brokers)s)", "statement_timestamp()", "1"
    elif vendor == "mysql":
        in_brokers = f"IN ({', '.join('%s' for _ in range(brokers))})"
        now, limit = "UTC_TIMESTAMP(6)", "%s"
    else:
        in_brokers = f"IN ({', '.join('?' for _ in range(brokers))})"
        now, limit = _SQLITE_NOW, "?"
    return _CANDIDATES.format(
        table=TABLE,
        pending=MessageStatus.PENDING,
        blocked=MessageStatus.BLOCKED,
        in_brokers=in_brokers,
        now=now,
        limit=limit,
    )


def claim_messages(
    connection: BaseDatabaseWrapper,
    brokers: Sequence[str],
    limit: int,
    lease_seconds: float,
) -> tuple[uuid.UUID, list[Envelope]]:
    """Claim up to ``limit`` messages of ``brokers``; return the lease token and the messages
    in id order (a key's in the order they must be sent)."""
    token = uuid.uuid4()
    queries = queries_for(connection)
    if queries.vendor == "postgresql":
        with transaction.atomic(using=connection.alias):
            queries.execute(connection, "SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK_CLASS,))
            _, rows = queries.execute(
                connection,
                POSTGRESQL_CLAIM_SQL,
                {"brokers": list(brokers), "limit": limit, "token": token, "lease": lease_seconds},
            )
    elif queries.vendor == "mysql":
        rows = _claim_on_mysql(connection, brokers, limit, lease_seconds, token)
    else:
        candidates = _candidates_sql("sqlite", len(brokers))
        params: list[Any] = [token.hex, f"+{lease_seconds:.3f} seconds", *brokers, limit]
        _, rows = queries.execute(
            connection, SQLITE_CLAIM_SQL.format(candidates=candidates), params
        )
    envelopes = [_envelope(row) for row in rows]
    envelopes.sort(key=lambda envelope: envelope.id)
    return token, envelopes


#: MariaDB: the claimed messages read back, in id order (`key` is a reserved word there).
MYSQL_CLAIMED_SQL = f"""
SELECT id, topic, `key`, type, headers, payload, broker, attempts FROM {TABLE}
WHERE id IN ({{ids}}) ORDER BY id
"""
MYSQL_CLAIM_SQL = f"""
UPDATE {TABLE}
SET lease_token = %s, lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND,
    available_at = NULL
WHERE id IN ({{ids}})
"""


def _claim_on_mysql(
    connection: BaseDatabaseWrapper,
    brokers: Sequence[str],
    limit: int,
    lease_seconds: float,
    token: uuid.UUID,
) -> list[Sequence[Any]]:
    """MariaDB's claim: serialized by a row lock, then read, update and read back."""
    queries = queries_for(connection)
    with transaction.atomic(using=connection.alias):
        queries.serialize_enqueuers(connection, "relay:claim")
        _, picked = queries.execute(
            connection, _candidates_sql("mysql", len(brokers)), [*brokers, limit]
        )
        if not picked:
            return []
        ids = [row[0] for row in picked]
        placeholders = ", ".join(["%s"] * len(ids))
        native = connection.features.has_native_uuid_field
        queries.execute(
            connection,
            MYSQL_CLAIM_SQL.format(ids=placeholders),
            [str(token) if native else token.hex, round(lease_seconds * 1_000_000), *ids],
        )
        _, rows = queries.execute(connection, MYSQL_CLAIMED_SQL.format(ids=placeholders), ids)
    return rows


def _envelope(row: Sequence[Any]) -> Envelope:
    message_id, topic, key, type_, headers, payload, broker, attempts = row
    if not isinstance(message_id, uuid.UUID):
        message_id = uuid.UUID(message_id)
    return Envelope(
        id=message_id,
        topic=topic,
        key=key,
        type=type_,
        body=payload if payload is not None else "null",
        broker=broker,
        headers=json.loads(headers) if headers else {},
        attempts=attempts,
    )
