"""The relay's claim on PostgreSQL: behind an advisory lock, rows locked as they are picked.

The relay's own writes (claims, deletes, marks) commit without waiting for their WAL to reach
the disk (``synchronous_commit`` off, for their transaction alone), as the workers' bookkeeping
does: a server crash that loses the last of them leaves claimed messages claimable again and
deleted ones pending, which the relay publishes again (consumers drop them by id). Nothing is
lost, and the table stays consistent. Each commit then skips its wait for the disk (5 to 7 ms
a commit against 2 on a busy machine, measured).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ...models import MessageStatus
from .. import queries_for
from ..message_sql import NO_TOKEN, TABLE, MessageQueries, candidates_sql
from .queries import PostgreSQLQueries

#: The class of the advisory lock that serializes claims (the job enqueuers' is "obox").
CLAIM_LOCK_CLASS = int.from_bytes(b"obrl", "big") & 0x7FFFFFFF

_PICK = candidates_sql(
    in_brokers="= ANY(%(brokers)s)", now="statement_timestamp()", own="%(own)s", limit="%(limit)s"
)

WAITING_SQL = f"SELECT EXISTS ({_PICK})"

# The first statement of a claim's transaction: the turn, and its settings (for this
# transaction alone, in the same round trip). The pick must walk the pending index in id order
# and stop at the limit: an outbox table's statistics are stale most of the time (it empties
# and fills between ANALYZEs), and planned for a near-empty table, the pick read every pending
# row by bitmap and sorted them (100 ms a claim behind a backlog of 10,000, against 2 ms). An
# index scan also marks the entries of deleted rows dead, which a bitmap scan never does, so
# the claims that follow skip them. JIT off: a plan whose alternatives are "disabled" costs
# more than its threshold, and compiling took longer than the claim.
CLAIM_TURN_SQL = """
SELECT pg_advisory_xact_lock(%(lock)s), set_config('synchronous_commit', 'off', true),
       set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true),
       set_config('jit', 'off', true)
"""

# The picked ids as one array, read by the primary key: as a join, a plan made for a small
# table hashed the whole table to update 500 rows of it.
CLAIM_SQL = f"""
UPDATE {TABLE} AS claimed
SET lease_token = %(token)s,
    lease_expires_at = statement_timestamp() + %(lease)s * interval '1 second',
    available_at = NULL
WHERE claimed.id = ANY(ARRAY({_PICK} FOR UPDATE))
RETURNING claimed.id, claimed.topic, claimed.key, claimed.type, claimed.headers::text,
          claimed.payload::text, claimed.broker, claimed.attempts
"""

# The turn and the claim, sent at once: one round trip (see execute_as_one_transaction).
CLAIM_IN_TURN_SQL = f"{CLAIM_TURN_SQL};{CLAIM_SQL}"

# A claim inside a caller's transaction (``Relay.drain()`` in a test's atomic block) takes its
# turn alone: settings made for the transaction would last to the end of the caller's.
CLAIM_TURN_ONLY_SQL = "SELECT pg_advisory_xact_lock(%s)"

# Deleting or marking a batch: one statement whatever its size (the ids as one array), whose
# transaction commits without waiting for the disk (the CTE's setting lasts to the end of it;
# the join makes the setting run first).
_UNSYNCED = "WITH unsynced AS (SELECT set_config('synchronous_commit', 'off', true))"
_HELD = "id = ANY(%(ids)s::uuid[]) AND lease_token = %(token)s"
DELETE_SENT_SQL = f"{_UNSYNCED} DELETE FROM {TABLE} USING unsynced WHERE {_HELD}"
# The changes of message_sql.SENT_CHANGES, and the time.
_MARK_SENT = f"""
{_UNSYNCED} UPDATE {TABLE}
SET status = '{MessageStatus.SENT}', lease_token = NULL, lease_expires_at = NULL, last_error = '',
    sent_at = statement_timestamp()
FROM unsynced WHERE
"""
MARK_SENT_SQL = f"{_MARK_SENT} {_HELD}"
# A claim's share confirmed in full: one range of the primary key, which reads a few pages,
# where 500 ids in an array descend the index 500 times (0.7 ms against 5 to 9, measured).
_HELD_RANGE = (
    "id BETWEEN %(first)s AND %(last)s AND broker = %(broker)s AND lease_token = %(token)s"
)
DELETE_CLAIM_SQL = f"{_UNSYNCED} DELETE FROM {TABLE} USING unsynced WHERE {_HELD_RANGE}"
MARK_CLAIM_SQL = f"{_MARK_SENT} {_HELD_RANGE}"


class PostgreSQLMessageQueries(MessageQueries):
    def waiting(self, connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
        params = {"brokers": list(brokers), "own": NO_TOKEN, "limit": 1}
        _, rows = queries_for(connection).execute(connection, WAITING_SQL, params)
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
        params = {
            "lock": CLAIM_LOCK_CLASS,
            "brokers": list(brokers),
            "own": own,
            "limit": limit,
            "token": token,
            "lease": lease_seconds,
        }
        if not connection.in_atomic_block:
            # The relay's own connection: the turn and the claim in one round trip.
            assert isinstance(queries, PostgreSQLQueries)
            _, rows = queries.execute_as_one_transaction(connection, CLAIM_IN_TURN_SQL, params)
            return rows
        # Claims take turns (a few milliseconds each): side by side, each would see the
        # other's picks of a key as free in its snapshot, and send a key's later message while
        # an earlier one is in flight. Publishing and recording still run side by side.
        with transaction.atomic(using=connection.alias):
            queries.execute(connection, CLAIM_TURN_ONLY_SQL, (CLAIM_LOCK_CLASS,))
            _, rows = queries.execute(connection, CLAIM_SQL, params)
        return rows

    def settle(
        self,
        connection: BaseDatabaseWrapper,
        token: uuid.UUID,
        ids: Sequence[uuid.UUID],
        *,
        keep: bool,
    ) -> int:
        if connection.in_atomic_block:
            # The caller's transaction (see CLAIM_TURN_ONLY_SQL): its commit stays synchronous.
            return super().settle(connection, token, ids, keep=keep)
        params = {"ids": list(ids), "token": token}
        count, _ = queries_for(connection).execute(
            connection, MARK_SENT_SQL if keep else DELETE_SENT_SQL, params
        )
        return count

    def settle_claim(
        self,
        connection: BaseDatabaseWrapper,
        token: uuid.UUID,
        broker: str,
        first: uuid.UUID,
        last: uuid.UUID,
        *,
        keep: bool,
    ) -> int:
        if connection.in_atomic_block:
            # The caller's transaction (see CLAIM_TURN_ONLY_SQL): its commit stays synchronous.
            return super().settle_claim(connection, token, broker, first, last, keep=keep)
        params = {"first": first, "last": last, "broker": broker, "token": token}
        count, _ = queries_for(connection).execute(
            connection, MARK_CLAIM_SQL if keep else DELETE_CLAIM_SQL, params
        )
        return count
