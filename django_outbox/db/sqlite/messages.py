"""The relay's claim on SQLite: one UPDATE, which holds the only write lock for its run."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .. import queries_for
from ..message_sql import (
    NO_TOKEN,
    SQLITE_NOW,
    TABLE,
    MessageQueries,
    candidates_sql,
    own_binds,
)


def _pick(brokers: int) -> str:
    marks = ", ".join("?" for _ in range(brokers))
    return candidates_sql(in_brokers=f"IN ({marks})", now=SQLITE_NOW, own="?", limit="?")


CLAIM_SQL = f"""
UPDATE {TABLE}
SET lease_token = ?, lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?),
    available_at = NULL
WHERE id IN ({{pick}})
RETURNING id, topic, key, type, headers, payload, broker, attempts
"""


class SQLiteMessageQueries(MessageQueries):
    def waiting(self, connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
        sql = f"SELECT EXISTS ({_pick(len(brokers))})"
        _, rows = queries_for(connection).execute(
            connection, sql, [*brokers, *[NO_TOKEN.hex] * own_binds(), 1]
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
        lease = f"+{lease_seconds:.3f} seconds"
        params: list[Any] = [token.hex, lease, *brokers, *[own.hex] * own_binds(), limit]
        sql = CLAIM_SQL.format(pick=_pick(len(brokers)))
        _, rows = queries_for(connection).execute(connection, sql, params)
        return rows
