"""What the relay writes after a batch: each write fenced by the claim's lease token.

A relay that lost its lease (it paused past it, and another relay took the messages over)
changes nothing here: every statement matches the token its claim gave, which a new claim
replaces. These run on the relay's own connection, each in autocommit: short, no lock held
across broker I/O.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence

from django.db import connections
from django.utils import timezone

from ..db.messages import settle_claim, settle_messages
from ..models import Message, MessageStatus

#: Ids per statement, under SQLite's limit on bound parameters.
CHUNK = 400


def _chunks(ids: Sequence[uuid.UUID]) -> list[Sequence[uuid.UUID]]:
    return [ids[start : start + CHUNK] for start in range(0, len(ids), CHUNK)]


def confirmed(using: str, token: uuid.UUID, ids: Sequence[uuid.UUID], *, keep: bool) -> int:
    """Delete the messages the broker confirmed (or mark them sent, with ``keep``); return how
    many still carried ``token``."""
    return settle_messages(connections[using], token, ids, keep=keep)


def confirmed_claim(
    using: str, token: uuid.UUID, broker: str, first: uuid.UUID, last: uuid.UUID, *, keep: bool
) -> int:
    """Delete (or mark sent) a claim's messages of ``broker``, from ``first`` to ``last``, all
    of which the broker confirmed; return how many still carried ``token``."""
    return settle_claim(connections[using], token, broker, first, last, keep=keep)


def released(using: str, token: uuid.UUID, ids: Sequence[uuid.UUID]) -> int:
    """Hand messages back unsent, at no cost to them (an outage, a batch cut short)."""
    done = 0
    for chunk in _chunks(ids):
        done += (
            Message.objects.using(using)
            .filter(pk__in=chunk, lease_token=token)
            .update(lease_token=None, lease_expires_at=None)
        )
    return done


def refused(
    using: str,
    token: uuid.UUID,
    message_id: uuid.UUID,
    attempts: int,
    reason: str,
    *,
    block: bool,
    retry_in: float,
) -> bool:
    """Record a refusal: block the message (its key waits behind it), or retry it later."""
    changes: dict[str, object] = {
        "attempts": attempts,
        "last_error": reason[:10_000],
        "lease_token": None,
        "lease_expires_at": None,
    }
    if block:
        changes["status"] = MessageStatus.BLOCKED
    else:
        changes["available_at"] = timezone.now() + datetime.timedelta(seconds=retry_in)
    return bool(
        Message.objects.using(using).filter(pk=message_id, lease_token=token).update(**changes)
    )
