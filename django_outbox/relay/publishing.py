"""``publish()`` and ``publish_many()``: messages written in the caller's transaction.

Everything is checked before the INSERT, so bad input raises ``PublishError`` (or
``PayloadError``) with nothing written and the caller's transaction still usable. The relay
sends the messages once the transaction commits; a rollback takes them back with the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..conf import get_settings
from ..exceptions import PayloadError, PublishError
from ..serialization import MAX_PAYLOAD_SIZE
from ..validation.relay import TOPIC_MAX_LENGTH, TYPE_MAX_LENGTH, headers_error, label_error
from ..validation.text import KEY_MAX_LENGTH, brief
from .ids import uuid7
from .wakeups import messages_published

if TYPE_CHECKING:
    from ..models import Message


def publish(
    topic: str,
    payload: Any,
    *,
    key: str | None = None,
    type: str | None = None,
    headers: Mapping[str, str] | None = None,
    broker: str | None = None,
) -> Message:
    """Write a message for ``topic`` in the caller's transaction and return it (unsent).

    ``payload`` is JSON data (dicts, lists, strings, numbers, booleans, None). Messages with
    the same ``key`` (an aggregate's id) reach the broker in the order they were published, one
    at a time; messages without one travel in parallel. ``type`` (an event's name) and
    ``headers`` (strings) travel with it. ``broker`` names one of ``OUTBOX["BROKERS"]``; the
    default is the only one there, or the one named "default".
    """
    (message,) = publish_many(topic, [payload], key=key, type=type, headers=headers, broker=broker)
    return message


def publish_many(
    topic: str,
    payloads: Iterable[Any],
    *,
    key: str | None = None,
    type: str | None = None,
    headers: Mapping[str, str] | None = None,
    broker: str | None = None,
) -> list[Message]:
    """Write one message per payload, in one INSERT, in order; all or nothing."""
    from ..models import Message  # The model needs the app registry; this module must not.

    broker_name = broker_for(broker)
    if problem := (
        label_error("topic", topic, TOPIC_MAX_LENGTH, required=True)
        or label_error("key", key, KEY_MAX_LENGTH, required=False)
        or label_error("type", type, TYPE_MAX_LENGTH, required=False)
        or headers_error(headers)
    ):
        raise PublishError(problem)
    if isinstance(payloads, str | bytes | Mapping):
        raise PublishError(
            f"publish_many takes a list of payloads, not a {payloads.__class__.__name__}; "
            "use publish() for one."
        )
    payloads = list(payloads)
    for index, payload in enumerate(payloads):
        check_payload(payload, f"payloads[{index}]" if len(payloads) > 1 else "payload")
    messages = [
        Message(
            id=uuid7(),
            topic=topic,
            key=key,
            type=type or "",
            headers=dict(headers or {}),
            payload=payload,
            broker=broker_name,
        )
        for payload in payloads
    ]
    if not messages:
        return []
    using = get_settings().database
    Message.objects.using(using).bulk_create(messages)
    messages_published(using)
    return messages


def broker_for(name: str | None) -> str:
    """Return the broker a message goes to: ``name``, checked, or the default one."""
    brokers = get_settings().brokers
    if name is None:
        if "default" in brokers:
            return "default"
        if len(brokers) == 1:
            return next(iter(brokers))
        if not brokers:
            raise PublishError(
                "No broker is configured: add one to OUTBOX['BROKERS'] (see docs/relay.md)."
            )
        raise PublishError(
            f"Several brokers are configured ({', '.join(sorted(brokers))}) and none is named "
            "'default': pass broker=..."
        )
    if name not in brokers:
        raise PublishError(
            f"broker {brief(name)} is not in OUTBOX['BROKERS'] ({', '.join(sorted(brokers))})."
        )
    return name


def check_payload(payload: Any, path: str) -> None:
    """Raise PayloadError unless ``payload`` is JSON data every database and consumer reads."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, default=_refuse)
    except RecursionError:
        raise PayloadError(f"{path} is nested too deep to be stored as JSON.") from None
    except (TypeError, ValueError) as error:
        raise PayloadError(f"{path}: {error}") from None
    if "\\u0000" in text:
        raise PayloadError(
            f"{path} contains a NUL character ('\\x00'); PostgreSQL cannot store it. Encode "
            "binary data (e.g. base64) before publishing."
        )
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise PayloadError(
            f"{path} contains a lone surrogate ({text[error.start]!r}); it is not Unicode text."
        ) from None
    if size > MAX_PAYLOAD_SIZE:
        raise PayloadError(
            f"{path} is {size} bytes of JSON; a message holds at most {MAX_PAYLOAD_SIZE} "
            "(django_outbox.serialization.MAX_PAYLOAD_SIZE). Publish the data's id instead."
        )


def _refuse(value: Any) -> Any:
    raise TypeError(
        f"a {type(value).__qualname__} is not JSON data; messages carry JSON as other services "
        "read it: convert it first (e.g. a datetime with .isoformat(), a Decimal with str())."
    )
