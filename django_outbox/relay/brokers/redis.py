"""Redis Streams (the ``redis`` extra): each message an entry XADDed to the stream ``topic``.

The entry's fields: ``id`` (the message id, for consumers to drop redeliveries), ``type``,
``key`` (empty for none), ``headers`` (JSON) and ``payload`` (the JSON text). A batch is one
pipeline: one round trip; Redis runs its commands in order. Redis confirms an XADD once the
entry is in memory; how durable that is depends on the server's persistence (``appendonly
yes``, ``appendfsync``). Redis keeps no message ids: a redelivery after a relay was killed
mid-batch is a second entry, which ``receive_once`` drops.

OPTIONS: ``url`` (default ``redis://localhost:6379/0``), ``maxlen`` (trim each stream to about
this many entries; default: no trimming), ``socket_timeout`` (seconds, default 5).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...envelope import Envelope
from . import Broker, BrokerUnavailable, Outcome, Refusal, without_password


class RedisStreams(Broker):
    """XADD each message to the stream named by its topic."""

    # Redis runs a pipeline's commands in order. What refuses one XADD (the key is no stream)
    # refuses every later one of its stream as well; only a full memory (OOM), which may pass
    # between two commands, could let a key's later message in after an earlier one failed.
    keeps_key_order = True

    def __init__(
        self,
        name: str,
        *,
        url: str = "redis://localhost:6379/0",
        maxlen: int | None = None,
        socket_timeout: float = 5.0,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.url = url
        self.maxlen = maxlen
        self.socket_timeout = socket_timeout
        self._client: Any = None

    def _connect(self) -> Any:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(
                self.url,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.socket_timeout,
                **self.options,
            )
        return self._client

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        import redis

        client = self._connect()
        pipeline = client.pipeline(transaction=False)
        for message in messages:
            pipeline.xadd(
                message.topic,
                {
                    "id": message.message_id,
                    "type": message.type,
                    "key": message.key or "",
                    "headers": json.dumps(message.headers),
                    "payload": message.body,
                },
                maxlen=self.maxlen,
                approximate=True,
            )
        try:
            results = pipeline.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError) as error:
            raise BrokerUnavailable(f"Redis at {without_password(self.url)}: {error}") from error
        outcomes: list[Outcome] = []
        for result in results:
            if isinstance(result, (redis.ConnectionError, redis.TimeoutError)):
                raise BrokerUnavailable(f"Redis at {without_password(self.url)}: {result}")
            if isinstance(result, Exception):
                # WRONGTYPE (the key is not a stream), OOM (maxmemory reached) and the like.
                oom = "OOM" in str(result)
                outcomes.append(Refusal(f"Redis refused: {result}", permanent=not oom))
            else:
                outcomes.append(None)
        return outcomes

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()
