"""A message on its way to a broker, as the relay claimed it and brokers receive it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which doubled
# the cost of building the envelopes of a claim (500 a batch) on the relay's hot path.
@dataclass(slots=True)
class Envelope:
    """One message to publish: its stable id, destination, ordering key and JSON body.

    ``body`` is the payload's JSON text (UTF-8 when encoded), sent as it is. ``id`` travels as
    the broker's message id (or a header where the broker has none) so that consumers can drop
    redeliveries (``django_outbox.receive_once``).
    """

    id: uuid.UUID
    topic: str
    key: str | None
    type: str
    body: str
    broker: str
    headers: dict[str, str] = field(default_factory=dict)
    #: Refusals so far (not outages).
    attempts: int = 0

    @property
    def message_id(self) -> str:
        """The id as consumers see it: the UUID's canonical text."""
        return str(self.id)

    def all_headers(self) -> dict[str, str]:
        """The user's headers with the message's own: id, type, key."""
        headers = dict(self.headers)
        headers["message-id"] = self.message_id
        if self.type:
            headers["message-type"] = self.type
        if self.key is not None:
            headers["message-key"] = self.key
        return headers
