"""The relay's claim as SQL both databases share, and the interface each implements.

``messages`` dispatches to ``postgresql.messages`` or ``sqlite.messages``; each builds its
statements from ``candidates_sql`` in its own dialect.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.functions import Now

from ..models import Message, MessageStatus

TABLE = Message._meta.db_table

#: Ids per statement where they are bound one by one: under SQLite's limit on parameters.
SETTLE_CHUNK = 400
#: What marking a confirmed message sent changes, besides its ``sent_at``.
SENT_CHANGES: dict[str, Any] = {
    "status": MessageStatus.SENT,
    "lease_token": None,
    "lease_expires_at": None,
    "last_error": "",
}

# An earlier message of a candidate's key that holds it back (leased, blocked, or waiting for a
# retry): the condition of the key_holds index, as it is written there (SQLite matches a
# partial index's condition term by term), then what holding means now.
_EARLIER_HOLDER = """
          SELECT 1 FROM {table} AS earlier{hint}
          WHERE earlier.broker = m.broker AND earlier.topic = m.topic AND earlier.key = m.key
            AND earlier.id < m.id
            AND earlier.key IS NOT NULL
            AND (earlier.lease_token IS NOT NULL OR earlier.status = '{blocked}'
                 OR earlier.available_at IS NOT NULL){holds}
            AND (earlier.status = '{blocked}'
                 OR earlier.lease_expires_at >= {now}
                 OR earlier.available_at > {now})"""

# The check that no earlier message of a candidate's key holds it, in three probes of the
# key_holds index (broker, topic, key, lease_token, id), each a range of its own: the leases
# below and above the token of the batch the claiming relay is sending (which it sends before
# this one: its messages do not hold their keys back), and the messages without a lease. One
# probe that passed over that batch's entries read every one of them for every candidate of
# its keys: a key with a backlog longer than a batch made each claim read batch x batch
# entries (55 to 93 ms a claim of 500 against 7 to 10, measured).
_CANDIDATES = """
    SELECT id FROM {table} AS m
    WHERE status = '{pending}' AND broker {in_brokers}
      AND (lease_expires_at IS NULL OR lease_expires_at < {now})
      AND (available_at IS NULL OR available_at <= {now})
      AND (m.key IS NULL OR ({key_free}))
    ORDER BY id
    LIMIT {limit}
"""
_KEY_FREE_IN_RANGES = """
          NOT EXISTS ({holder} AND earlier.lease_token < {own})
          AND NOT EXISTS ({holder} AND earlier.lease_token > {own})
          AND NOT EXISTS ({holder} AND earlier.lease_token IS NULL)"""
# MariaDB reads a correlated subquery's index by its equal columns alone (``ref``), never by a
# range of the next one: there the three probes read the batch's entries twice over (480 to
# 670 ms a claim of 500 behind a key's batch, against 250 to 430 for one probe).
_KEY_FREE_IN_ONE = """
          NOT EXISTS ({holder}
            -- Not the batch the claiming relay is sending: it sends this one after that one.
            AND (earlier.lease_token IS NULL OR earlier.lease_token <> {own}))"""

# Django stores SQLite datetimes as UTC text in this shape; ids and tokens as 32 hex digits.
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


#: The lease token of no message: what a claim passes as ``own`` when its relay sends no batch.
NO_TOKEN = uuid.UUID(int=0)


def own_binds(*, holds_column: bool = False) -> int:
    """How many times ``candidates_sql`` binds the token of the batch in flight."""
    return 1 if holds_column else 2


def candidates_sql(
    *, in_brokers: str, now: str, own: str, limit: str, holds_column: bool = False
) -> str:
    """The claim's pick, in a database's dialect: how it tests a broker list, reads its clock
    and binds the token of the batch in flight (``own_binds`` times) and the limit (in that
    order).

    ``holds_column``: MariaDB, which has no partial indexes. Its key index is (broker, topic,
    key, holds_key, id), where the generated column holds_key stands for the partial index's
    condition (migration 0025), named so that the check reads the key's holders alone, in
    one probe; and the index is forced: by its statistics, its optimizer chose at times to
    range-check each candidate against any index, the primary key's among them (half the
    table read per candidate)."""
    holder = _EARLIER_HOLDER.format(
        table=TABLE,
        hint=" FORCE INDEX (outbox_message_key_holds)" if holds_column else "",
        holds="\n            AND earlier.holds_key = 1" if holds_column else "",
        blocked=MessageStatus.BLOCKED,
        now=now,
    )
    key_free = (_KEY_FREE_IN_ONE if holds_column else _KEY_FREE_IN_RANGES).format(
        holder=holder, own=own
    )
    return _CANDIDATES.format(
        table=TABLE,
        pending=MessageStatus.PENDING,
        key_free=key_free,
        in_brokers=in_brokers,
        now=now,
        limit=limit,
    )


class MessageQueries:
    """The relay's claim for one database (``postgresql.messages``, ``sqlite.messages``)."""

    def waiting(self, connection: BaseDatabaseWrapper, brokers: Sequence[str]) -> bool:
        """Whether a claim would find a message now: one read, no lock, for idle relays."""
        raise NotImplementedError

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        brokers: Sequence[str],
        limit: int,
        lease_seconds: float,
        token: uuid.UUID,
        own: uuid.UUID = NO_TOKEN,
    ) -> list[Sequence[Any]]:
        """Lease up to ``limit`` messages to ``token``; return their rows (any order).

        ``own``: the lease token of the batch the relay is sending meanwhile, whose messages do
        not hold their keys back here (they are sent first, by the same relay).
        """
        raise NotImplementedError

    def settle(
        self,
        connection: BaseDatabaseWrapper,
        token: uuid.UUID,
        ids: Sequence[uuid.UUID],
        *,
        keep: bool,
    ) -> int:
        """Delete the messages ``ids`` the broker confirmed (mark them sent, with ``keep``)
        where they still carry ``token``; return how many did."""
        done = 0
        for start in range(0, len(ids), SETTLE_CHUNK):
            held = Message.objects.using(connection.alias).filter(
                pk__in=ids[start : start + SETTLE_CHUNK], lease_token=token
            )
            if keep:
                done += held.update(**SENT_CHANGES, sent_at=Now())
            else:
                done += held.delete()[0]
        return done

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
        """Delete (mark sent, with ``keep``) the messages of ``broker`` from ``first`` to
        ``last`` that still carry ``token``, in one statement; return how many did."""
        held = Message.objects.using(connection.alias).filter(
            pk__gte=first, pk__lte=last, broker=broker, lease_token=token
        )
        if keep:
            return held.update(**SENT_CHANGES, sent_at=Now())
        return held.delete()[0]
