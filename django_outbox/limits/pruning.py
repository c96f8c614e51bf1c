"""Deleting limits' rows that hold nothing: one row per key ever limited would pile up.

A row holds a pause, a bucket's tokens, or nothing (a cap's row only serializes claims). A
bucket untouched for a day is full whatever its rate (the longest period is a day), so
deleting it changes nothing: the next claim creates it again, full. Paused rows stay until
their pause ends.
"""

from __future__ import annotations

from django.db import connections
from django.db.models import Q

from ..db import queries_for
from ..models import LimitState
from ..validation.limits import PERIOD_MAX

#: How long a bucket is left untouched before its row is deleted.
IDLE_SECONDS = PERIOD_MAX


def prune_idle_limits(using: str) -> int:
    """Delete the limits' rows that hold no pause and no bucket in use; return how many."""
    connection = connections[using]
    now = queries_for(connection).database_seconds(connection)
    deleted, _ = (
        LimitState.objects.using(using)
        .filter(Q(paused_until__isnull=True) | Q(paused_until__lt=now))
        .filter(Q(refilled_at__isnull=True) | Q(refilled_at__lt=now - IDLE_SECONDS))
        .delete()
    )
    return deleted
