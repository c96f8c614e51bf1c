"""Deleting what the relay and the inbox keep for a while: sent messages and handled ids."""

from __future__ import annotations

import datetime
import time
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from ..conf import RelayOptions
from ..models import InboxEntry, Message

#: Rows per DELETE: short statements, whatever the backlog.
PRUNE_BATCH = 1000
#: How often a relay prunes: rarely, so that an idle relay costs next to nothing.
PRUNE_EVERY_SECONDS = 600.0


def prune_sent(using: str, retention: float | None) -> int:
    """Delete sent messages older than ``retention`` seconds; return how many."""
    if retention is None:
        return 0
    cutoff = timezone.now() - datetime.timedelta(seconds=retention)
    return _delete_in_batches(
        Message.objects.using(using).sent().filter(sent_at__lt=cutoff).order_by("sent_at"),
        using,
        Message,
    )


def prune_inbox(using: str, retention: float) -> int:
    """Forget handled message ids older than ``retention`` seconds; return how many."""
    cutoff = timezone.now() - datetime.timedelta(seconds=retention)
    return _delete_in_batches(
        InboxEntry.objects.using(using).filter(received_at__lt=cutoff).order_by("received_at"),
        using,
        InboxEntry,
    )


def _delete_in_batches(
    queryset: QuerySet[Any], using: str, model: type[Message] | type[InboxEntry]
) -> int:
    deleted = 0
    while True:
        ids = list(queryset.values_list("pk", flat=True)[:PRUNE_BATCH])
        if not ids:
            return deleted
        deleted += model.objects.using(using).filter(pk__in=ids).delete()[0]
        if len(ids) < PRUNE_BATCH:
            return deleted


class Housekeeping:
    """Prune every ``PRUNE_EVERY_SECONDS``, from the relay's loop."""

    def __init__(self, using: str, options: RelayOptions) -> None:
        self.using = using
        self.options = options
        self._next = time.monotonic()

    def maybe_prune(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + PRUNE_EVERY_SECONDS
        prune_sent(self.using, self.options.retention)
        prune_inbox(self.using, self.options.inbox_retention)
