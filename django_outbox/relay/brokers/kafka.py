"""Kafka (the ``kafka`` extra, confluent-kafka): an idempotent producer, the key as partition key.

Each message goes to its topic with its key as the record key (so a key's messages share a
partition, in order), its id, type and key as headers. The producer is idempotent
(``enable.idempotence``: ``acks=all``, retries without duplicates or reordering within a
partition); a batch's records are in flight together and the call returns once every delivery
report came. A record larger than the broker allows, or for a topic that does not exist (with
auto-creation off), is refused for good.

OPTIONS: ``config`` (librdkafka's settings, e.g. ``{"bootstrap.servers": "kafka:9092"}``; the
idempotence settings are added), ``timeout`` (seconds to wait for a batch's delivery reports,
default 10).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...envelope import Envelope
from . import NOT_SENT, Broker, BrokerUnavailable, KeyStops, Outcome, Refusal

#: librdkafka's error names (KafkaError.name()) that refuse one record for good.
REFUSING_ERRORS = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_TOPIC",
        "_UNKNOWN_PARTITION",
        "TOPIC_AUTHORIZATION_FAILED",
        "INVALID_RECORD",
        "CORRUPT_MESSAGE",
        "INVALID_TOPIC_EXCEPTION",
        "POLICY_VIOLATION",
    }
)


class Kafka(Broker):
    """Produce each message with an idempotent producer; wait for every delivery report."""

    # The idempotent producer keeps a partition's order, retries included, and fails every
    # later record of a partition after one it could not deliver; a record refused before it
    # left (too large) stops its key here.
    keeps_key_order = True

    def __init__(
        self,
        name: str,
        *,
        config: dict[str, Any] | None = None,
        timeout: float = 10.0,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.config = {
            **(config or {}),
            "enable.idempotence": True,
            "acks": "all",
            # Reports come within the batch's wait, never after the relay gave up on it.
            "message.timeout.ms": int(timeout * 1000),
        }
        self.timeout = timeout
        self._producer: Any = None

    def _connect(self) -> Any:
        if self._producer is None:
            import confluent_kafka

            self._producer = confluent_kafka.Producer(self.config)
        return self._producer

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        import confluent_kafka

        producer = self._connect()
        reports: list[Any] = [None] * len(messages)
        done = [False] * len(messages)

        def delivered(index: int) -> Any:
            def report(error: Any, _record: Any) -> None:
                reports[index] = error
                done[index] = True

            return report

        stops = KeyStops()
        try:
            for index, message in enumerate(messages):
                if stops.stopped(message):
                    reports[index], done[index] = NOT_SENT, True
                    continue
                headers = [(name, value.encode()) for name, value in message.all_headers().items()]
                while True:
                    try:
                        producer.produce(
                            message.topic,
                            value=message.body.encode(),
                            key=message.key.encode() if message.key is not None else None,
                            headers=headers,
                            on_delivery=delivered(index),
                        )
                        break
                    except BufferError:
                        # The producer's queue is full: let reports drain it.
                        producer.poll(0.1)
                    except confluent_kafka.KafkaException as error:
                        # Refused before it left (too large for message.max.bytes).
                        if error.args[0].name() not in REFUSING_ERRORS:
                            raise
                        reports[index], done[index] = error.args[0], True
                        stops.stop(message)
                        break
                producer.poll(0)
            producer.flush(self.timeout)
        except confluent_kafka.KafkaException as error:
            self.close()
            raise BrokerUnavailable(f"Kafka: {error}") from error
        if not all(done):
            raise BrokerUnavailable(
                f"Kafka: {done.count(False)} of {len(messages)} records unconfirmed after "
                f"{self.timeout:g} s"
            )
        outcomes: list[Outcome] = []
        for report in reports:
            if report is None or report is NOT_SENT:
                outcomes.append(report)
            elif report.name() in REFUSING_ERRORS:
                outcomes.append(Refusal(f"Kafka refused it: {report.name()}: {report.str()}"))
            else:
                if report.fatal():
                    # The idempotent producer cannot go on: a new one starts the next batch.
                    self.close()
                raise BrokerUnavailable(f"Kafka: {report.name()}: {report.str()}")
        return outcomes

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(0)
