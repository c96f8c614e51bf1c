"""RabbitMQ (the ``rabbitmq`` extra, pika): publisher confirms, and the mandatory flag.

Each message is published to ``exchange`` with its topic as the routing key, persistent
(``delivery_mode=2``), its id as the AMQP ``message_id`` and its type as ``type``, its key and
headers as headers. The channel is in confirm mode: a publish returns once the broker
confirmed it (for a durable queue, once it is written). A message no queue is bound for is
returned (``mandatory``) and refused for good, as is one larger than the broker allows; a
negative acknowledgement is a refusal that may pass.

OPTIONS: ``url`` (default ``amqp://guest:guest@localhost:5672/%2F``), ``exchange`` (default
``""``, the default exchange: the topic is then a queue's name), ``timeout`` (seconds for
connecting and for each confirm, default 10).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from ...envelope import Envelope
from . import (
    NOT_SENT,
    Broker,
    BrokerUnavailable,
    KeyStops,
    Outcome,
    Refusal,
    without_password,
)

#: AMQP reply codes that close the channel over one message: the message is refused, the
#: connection is fine. 404: no such exchange; 406: larger than max_message_size, and others.
REFUSING_CODES = frozenset({403, 404, 406})


class RabbitMQ(Broker):
    """Publish each message with confirms and mandatory routing."""

    # One message at a time, each confirmed before the next is sent.
    keeps_key_order = True

    def __init__(
        self,
        name: str,
        *,
        url: str = "amqp://guest:guest@localhost:5672/%2F",
        exchange: str = "",
        timeout: float = 10.0,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.url = url
        self.exchange = exchange
        self.timeout = timeout
        self._connection: Any = None
        self._channel: Any = None

    def _open_channel(self) -> Any:
        import pika

        if self._connection is None or not self._connection.is_open:
            parameters = pika.URLParameters(self.url)
            parameters.socket_timeout = self.timeout
            parameters.blocked_connection_timeout = self.timeout
            parameters.stack_timeout = self.timeout
            self._connection = pika.BlockingConnection(parameters)
            self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        import pika.exceptions as errors

        if self._connection is not None:
            try:
                # Answers the broker's heartbeats: an idle relay's connection may have been
                # closed by the broker meanwhile, which this finds out before sending.
                self._connection.process_data_events(0)
            except (errors.AMQPError, OSError):
                self.close()
        return self._publish(messages)

    def _publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        import pika
        import pika.exceptions as errors

        outcomes: list[Outcome] = []
        stops = KeyStops()
        # One confirm at a time: a slow broker could keep a large batch going past the relay's
        # lease, and another relay would send it too. What is left then goes back, unsent.
        give_up_at = time.monotonic() + self.timeout
        try:
            channel = self._open_channel()
            for message in messages:
                if stops.stopped(message) or time.monotonic() > give_up_at:
                    outcomes.append(NOT_SENT)
                    continue
                headers: dict[str, Any] = dict(message.headers)
                if message.key is not None:
                    headers["message-key"] = message.key
                properties = pika.BasicProperties(
                    message_id=message.message_id,
                    type=message.type or None,
                    headers=headers,
                    content_type="application/json",
                    delivery_mode=pika.DeliveryMode.Persistent,
                )
                try:
                    channel.basic_publish(
                        self.exchange,
                        message.topic,
                        message.body.encode(),
                        properties=properties,
                        mandatory=True,
                    )
                except errors.UnroutableError:
                    stops.stop(message)
                    outcomes.append(
                        Refusal(
                            f"unroutable: no queue is bound to exchange {self.exchange!r} for "
                            f"routing key {message.topic!r}"
                        )
                    )
                except errors.NackError:
                    stops.stop(message)
                    outcomes.append(Refusal("the broker nacked it", permanent=False))
                except errors.ChannelClosedByBroker as error:
                    if error.reply_code not in REFUSING_CODES:
                        raise
                    stops.stop(message)
                    outcomes.append(Refusal(f"{error.reply_code} {error.reply_text}"))
                    channel = self._open_channel()
                else:
                    outcomes.append(None)
        except (errors.AMQPError, OSError) as error:
            self.close()
            raise BrokerUnavailable(
                f"RabbitMQ at {without_password(self.url)}: {error!r}"
            ) from error
        return outcomes

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            # A broken connection may fail to close in any way.
            with contextlib.suppress(Exception):
                connection.close()
