"""The consumer's side: ``receive_once`` records a message id with the effects it had.

A broker delivers at least once: after a relay was killed mid-batch, after a consumer crashed
before its ack. A consumer that handles a message inside ``receive_once`` records the id in the
same transaction as its writes, so a second delivery finds the id and has no effect:

    with receive_once("billing", message_id) as first:
        if first:
            Invoice.objects.create(...)
    channel.basic_ack(...)

Two deliveries handled at once are serialized by the unique constraint: the second waits for
the first one's transaction and, once it commits, finds the id taken (``first`` is False);
if it rolled back, the second does the work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, transaction

from ..conf import get_settings
from ..validation.relay import label_error
from ..validation.text import KEY_MAX_LENGTH


@contextmanager
def receive_once(consumer: str, message_id: object, *, using: str | None = None) -> Iterator[bool]:
    """Open a transaction that records ``message_id`` for ``consumer``; yield whether this is
    its first delivery.

    The block's writes commit with the record, or roll back with it (an exception in the
    block): a message whose handling failed is handled again when it comes back. When
    ``first`` is False, do nothing but acknowledge it.
    """
    from ..models import InboxEntry  # The model needs the app registry; this module must not.

    using = using or get_settings().database
    text = str(message_id) if message_id is not None else ""
    if problem := label_error("consumer", consumer, 255, required=True) or label_error(
        "message_id", text, KEY_MAX_LENGTH, required=True
    ):
        raise ValueError(problem)
    with transaction.atomic(using=using):
        try:
            with transaction.atomic(using=using):
                InboxEntry.objects.using(using).create(consumer=consumer, message_id=text)
        except IntegrityError:
            yield False
            return
        yield True
