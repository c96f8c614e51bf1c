"""NATS JetStream (the ``nats`` extra, nats-py): publishes acknowledged by the stream.

Each message is published to the subject named by its topic, with its id as the
``Nats-Msg-Id`` header: JetStream drops a second message with the same id within the stream's
duplicate window (two minutes by default), so a batch sent again after a relay was killed
mid-batch is stored once. A batch's publishes are in flight together and the call returns
once the stream acknowledged each. A subject no stream captures is refused (it may pass once a
stream is added); one larger than the server allows is refused for good.

The client is asyncio's: the adapter runs it on an event loop in a thread of its own.

OPTIONS: ``servers`` (default ``["nats://localhost:4222"]``), ``timeout`` (seconds for
connecting and for each acknowledgement, default 10), ``stream`` (expect this stream to
capture every subject; default: any).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Sequence
from typing import Any

from ...envelope import Envelope
from . import NOT_SENT, Broker, BrokerUnavailable, KeyStops, Outcome, Refusal


class NatsJetStream(Broker):
    """Publish each message to JetStream, with its id as Nats-Msg-Id."""

    # The publishes of a batch leave in order on one connection and the stream stores them in
    # that order; what refuses one (no stream, the stream's limits) refuses the later ones of
    # its subject too. A message too large is refused here, before anything after it of its
    # key is sent. A lost acknowledgement hands the batch back: JetStream drops the copies
    # sent again within its duplicate window (Nats-Msg-Id).
    keeps_key_order = True

    def __init__(
        self,
        name: str,
        *,
        servers: Sequence[str] | str = ("nats://localhost:4222",),
        timeout: float = 10.0,
        stream: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        self.timeout = timeout
        self.stream = stream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None

    def _run(self, coroutine: Any) -> Any:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name=f"outbox-nats-{self.name}", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout=self.timeout * 3)
        except concurrent.futures.TimeoutError as error:
            future.cancel()
            raise BrokerUnavailable(f"NATS at {self.servers}: no answer in time") from error

    async def _connect(self) -> Any:
        import nats

        if self._client is None or self._client.is_closed:
            options = {
                # The relay logs an outage once; nats-py's own callback logs every refused
                # connection with its traceback.
                "error_cb": _ignore_error,
                **self.options,
            }
            self._client = await nats.connect(
                servers=self.servers,
                connect_timeout=self.timeout,
                # The relay decides when to try again; a dead server fails the batch at once.
                # (However allow_reconnect is set, nats-py's first connect tries a server
                # again and again, a pause between tries, unless max_reconnect_attempts is
                # above 0: 1 lets it try each server twice, at once, then give up.)
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                **options,
            )
        return self._client

    async def _publish(self, messages: Sequence[Envelope]) -> list[Any]:
        import nats.errors

        client = await self._connect()
        jetstream = client.jetstream(timeout=self.timeout)
        stops = KeyStops()
        results: list[Any] = [None] * len(messages)
        sends: list[Any] = []
        sending: list[int] = []
        for index, message in enumerate(messages):
            body = message.body.encode()
            if stops.stopped(message):
                results[index] = NOT_SENT
            elif len(body) > client.max_payload:
                stops.stop(message)
                results[index] = nats.errors.MaxPayloadError(
                    f"{len(body)} bytes; the server's max_payload is {client.max_payload}"
                )
            else:
                sending.append(index)
                sends.append(
                    jetstream.publish(
                        message.topic,
                        body,
                        timeout=self.timeout,
                        stream=self.stream,
                        headers={**message.all_headers(), "Nats-Msg-Id": message.message_id},
                    )
                )
        for index, result in zip(
            sending, await asyncio.gather(*sends, return_exceptions=True), strict=True
        ):
            results[index] = result
        return results

    def publish(self, messages: Sequence[Envelope]) -> list[Outcome]:
        import nats.errors
        import nats.js.errors

        try:
            results = self._run(self._publish(messages))
        except BrokerUnavailable:
            raise
        except (nats.errors.Error, OSError, asyncio.TimeoutError) as error:
            raise BrokerUnavailable(f"NATS at {self.servers}: {error!r}") from error
        outcomes: list[Outcome] = []
        for result in results:
            if result is NOT_SENT:
                outcomes.append(NOT_SENT)
            elif not isinstance(result, BaseException):
                outcomes.append(None)
            elif isinstance(result, nats.js.errors.NoStreamResponseError):
                outcomes.append(
                    Refusal("no JetStream stream captures this subject", permanent=False)
                )
            elif isinstance(
                result, (nats.js.errors.ServiceUnavailableError, nats.js.errors.ServerError)
            ):
                raise BrokerUnavailable(f"JetStream at {self.servers}: {result!r}") from result
            elif isinstance(result, nats.js.errors.APIError):
                # The stream refused it: too large, the stream full (discard new), a wrong
                # expected stream. Sending it again does not change that.
                outcomes.append(Refusal(f"JetStream refused it: {result}"))
            elif isinstance(result, nats.errors.MaxPayloadError):
                outcomes.append(Refusal(f"larger than the server's max_payload: {result}"))
            else:
                # A timeout or a lost connection: whether it was stored is unknown.
                raise BrokerUnavailable(f"NATS at {self.servers}: {result!r}") from result
        return outcomes

    def close(self) -> None:
        loop, thread, client = self._loop, self._thread, self._client
        self._loop, self._thread, self._client = None, None, None
        if loop is None:
            return
        if client is not None and not client.is_closed:
            # A broken connection may fail to close in any way.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=self.timeout)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(self.timeout)
        loop.close()


async def _ignore_error(_error: Exception) -> None:
    """nats-py's error callback: the adapter raises what matters as BrokerUnavailable."""
