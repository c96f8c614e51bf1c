"""The relay's claim on MariaDB: serialized by a row lock, then read, update and read back.

Two claims side by side would each see the other's picks of a key as free, as on PostgreSQL:
claims wait for each other on a row of the enqueuers' lock table (``serialize_enqueuers``), in
one short transaction. MariaDB has no UPDATE ... RETURNING: the claimed rows are read back.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import queries_for
from ..message_sql import NO_TOKEN, TABLE, MessageQueries, candidates_sql, own_binds

NOW = "UTC_TIMESTAMP(6)"

CLAIM_SQL = f"""
UPDATE {TABLE}
SET lease_token = %s, lease_expires_at = {NOW} + INTERVAL %s MICROSECOND, available_at = NULL
WHERE id IN ({{ids}})
"""
# `key` is a reserved word there.
CLAIMED_SQL = f"""
SELECT id, topic, `key`, type, headers, payload, broker, attempts FROM {TABLE}
WHERE id IN ({{ids}}) ORDER BY id
"""


def _pick(brokers: int) -> str:
    marks = ", ".join("%s" for _ in range(brokers))
    return candidates_sql(
        in_brokers=f"IN ({marks})", now=NOW, own="%s", limit="%s", holds_column=True
    )


def _token(connection: BaseDatabaseWrapper, token: uuid.UUID) -> str:
    """A lease token as the column stores it (MariaDB 10.7+ has a UUID type)."""
    return str(token) if connection.features.has_native_uuid_field else token.hex


class MySQLMessageQueries(MessageQueries):
    def waiting(self, connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
        sql = f"SELECT EXISTS ({_pick(len(brokers))})"
        own = _token(connection, NO_TOKEN)
        _, rows = queries_for(connection).execute(
            connection, sql, [*brokers, *[own] * own_binds(holds_column=True), 1]
        )
        return bool(rows[0][0])

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        brokers: Sequence[str],
        limit: int,
        lease_seconds: float,
        token: uuid.UUID,
        own: uuid.UUID = NO_TOKEN,
    ) -> list[Sequence[Any]]:
        queries = queries_for(connection)
        with transaction.atomic(using=connection.alias):
            queries.serialize_enqueuers(connection, "relay:claim")
            _, picked = queries.execute(
                connection,
                _pick(len(brokers)),
                [*brokers, *[_token(connection, own)] * own_binds(holds_column=True), limit],
            )
            if not picked:
                return []
            ids = [row[0] for row in picked]
            marks = ", ".join(["%s"] * len(ids))
            queries.execute(
                connection,
                CLAIM_SQL.format(ids=marks),
                [_token(connection, token), round(lease_seconds * 1_000_000), *ids],
            )
            _, rows = queries.execute(connection, CLAIMED_SQL.format(ids=marks), ids)
        return rows
