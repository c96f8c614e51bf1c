"""The relay's claim on PostgreSQL: behind an advisory lock, rows locked as they are picked."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import queries_for
from ..message_sql import TABLE, MessageQueries, candidates_sql

#: The class of the advisory lock that serializes claims (the job enqueuers' is "obox").
CLAIM_LOCK_CLASS = int.from_bytes(b"obrl", "big") & 0x7FFFFFFF

_PICK = candidates_sql(
    in_brokers="= ANY(%(brokers)s)", now="statement_timestamp()", limit="%(limit)s"
)

WAITING_SQL = f"SELECT EXISTS ({_PICK})"

CLAIM_SQL = f"""
WITH picked AS ({_PICK} FOR UPDATE)
UPDATE {TABLE} AS claimed
SET lease_token = %(token)s,
    lease_expires_at = statement_timestamp() + %(lease)s * interval '1 second',
    available_at = NULL
FROM picked WHERE claimed.id = picked.id
RETURNING claimed.id, claimed.topic, claimed.key, claimed.type, claimed.headers::text,
          claimed.payload::text, claimed.broker, claimed.attempts
"""


class PostgreSQLMessageQueries(MessageQueries):
    def waiting(self, connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
        params = {"brokers": list(brokers), "limit": 1}
        _, rows = queries_for(connection).execute(connection, WAITING_SQL, params)
        return bool(rows[0][0])

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        brokers: Sequence[str],
        limit: int,
        lease_seconds: float,
        token: uuid.UUID,
    ) -> list[Sequence[Any]]:
        queries = queries_for(connection)
        # Claims take turns (a few milliseconds each): side by side, each would see the
        # other's picks of a key as free in its snapshot, and send a key's later message while
        # an earlier one is in flight. Publishing and recording still run side by side.
        with transaction.atomic(using=connection.alias):
            queries.execute(connection, "SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK_CLASS,))
            _, rows = queries.execute(
                connection,
                CLAIM_SQL,
                {"brokers": list(brokers), "limit": limit, "token": token, "lease": lease_seconds},
            )
        return rows
