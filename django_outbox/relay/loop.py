"""The relay: claims committed messages in short transactions and publishes them with confirms.

One ``Relay`` runs in a thread of ``run_outbox_worker`` (or alone, ``--relay-only``). Each
pass claims a batch (``db.messages.claim_messages``: id order, one relay at a time per key),
publishes it with no database transaction open, and then deletes the confirmed messages (or
marks them sent), fenced by the claim's lease token. Adapters that keep a key's order within a
batch (``Broker.keeps_key_order``: every built-in one) get the whole batch in one pipelined
call; others get it in rounds: the first of each key (with every keyless message), then the
second of each key, and so on, so that a key whose message fails sends nothing after it.

A broker that cannot be reached costs nothing: the batch is handed back and the relay waits a
growing pause. A refusal (too large, unroutable) costs the message an attempt; a refusal for
good, or ``MAX_REFUSALS`` of them, blocks it, and with it the later messages of its key, until
the admin retries or skips it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, connections

from ..conf import get_settings
from ..db import queries_for
from ..db.messages import CHANNEL, claim_messages, messages_waiting
from ..db.outage import ErrorBackoff
from ..envelope import Envelope
from . import outcomes, wakeups
from .brokers import NOT_SENT, BrokerUnavailable, Outcome, Refusal, broker_named, close_brokers
from .housekeeping import Housekeeping

logger = logging.getLogger(__name__)

#: The longest pause after broker or database errors.
MAX_BACKOFF = 30.0
#: How often an idle relay that hears NOTIFY (PostgreSQL) looks anyway, at the least: the
#: listener wakes it for every commit, and again after it reconnected, so the poll is only a
#: safety net there.
LISTENING_POLL_SECONDS = 5.0


@dataclass
class RelayStats:
    """What a relay did: messages confirmed, refused, blocked, handed back; batches claimed."""

    sent: int = 0
    refused: int = 0
    blocked: int = 0
    released: int = 0
    batches: int = 0
    by_broker: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def __str__(self) -> str:
        return (
            f"sent={self.sent} refused={self.refused} blocked={self.blocked} "
            f"released={self.released} batches={self.batches}"
        )


@dataclass
class BatchResult:
    """One pass: how many messages it claimed and sent, and whether a broker was unreachable."""

    claimed: int = 0
    sent: int = 0
    unavailable: list[str] = field(default_factory=list)


class Relay:
    """Publish committed messages of ``brokers`` (every configured one when empty)."""

    def __init__(
        self,
        *,
        brokers: Sequence[str] = (),
        relay_id: str = "",
        batch_size: int | None = None,
        poll_seconds: float | None = None,
        housekeeping: bool = True,
    ) -> None:
        outbox = get_settings()
        self.using = outbox.database
        options = outbox.relay
        self.brokers = list(brokers) or sorted(outbox.brokers)
        unknown = sorted(set(self.brokers) - set(outbox.brokers))
        if unknown:
            raise ValueError(
                f"broker {', '.join(unknown)} is not in OUTBOX['BROKERS'] "
                f"({', '.join(sorted(outbox.brokers)) or 'none configured'})."
            )
        self.relay_id = relay_id or "relay"
        self.batch_size = batch_size or options.batch_size
        self.lease_seconds = options.lease_seconds
        self.poll_seconds = options.poll_seconds if poll_seconds is None else poll_seconds
        self.retry_seconds = options.retry_seconds
        self.max_refusals = options.max_refusals
        self.keep_sent = options.retention is not None
        self.stats = RelayStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._housekeeping = Housekeeping(self.using, options) if housekeeping else None
        self._database_errors = ErrorBackoff(
            f"relaying messages relay={self.relay_id}",
            logger,
            first_delay=self.poll_seconds,
            max_delay=MAX_BACKOFF,
        )
        self._broker_errors: dict[str, ErrorBackoff] = {}
        # While running: writes a batch's outcomes while the next batch is claimed and sent.
        self._writer: OutcomeWriter | None = None
        # Brokers that failed, and when the relay may try them again (time.monotonic()).
        self._resting: dict[str, float] = {}

    # Control, from other threads and signal handlers.

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self, _payload: str = "") -> None:
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # The loop.

    def run(self) -> RelayStats:
        """Relay until ``request_stop()``; return what was done."""
        if not self.brokers:
            logger.info("relay not started relay=%s: no broker configured", self.relay_id)
            return self.stats
        logger.info("relay started relay=%s brokers=%s", self.relay_id, ",".join(self.brokers))
        wakeups.subscribe(self.wake)
        listener_done = threading.Event()
        if queries_for(connections[self.using]).listens:
            threading.Thread(
                target=self._listen,
                args=(listener_done,),
                name="outbox-relay-listener",
                daemon=True,
            ).start()
        self._writer = OutcomeWriter(self.using, self.relay_id)
        idle = True
        idle_poll = self.poll_seconds
        if queries_for(connections[self.using]).listens:
            idle_poll = max(self.poll_seconds, LISTENING_POLL_SECONDS)
        try:
            while not self._stop.is_set():
                self._wake.clear()
                try:
                    result = self.relay_once(look_first=idle)
                    if self._housekeeping is not None:
                        self._housekeeping.maybe_prune()
                except DatabaseError as exc:
                    connections[self.using].close()
                    self._wake.wait(self._database_errors.failed(exc))
                    continue
                self._database_errors.succeeded()
                idle = result.claimed == 0
                if idle:
                    # The last batch's rows may still hold their keys: written before looking
                    # again, so that an empty claim means nothing is ready.
                    self._writer.flush()
                if result.claimed >= self.batch_size and not result.unavailable:
                    continue
                self._wake.wait(self._pause(result, idle_poll if idle else self.poll_seconds))
        finally:
            wakeups.unsubscribe(self.wake)
            listener_done.set()
            self._writer.stop()
            self._writer = None
            close_brokers()
            connections[self.using].close()
        logger.info("relay stopped relay=%s %s", self.relay_id, self.stats)
        return self.stats

    def _pause(self, result: BatchResult, poll: float) -> float:
        resting = [until - time.monotonic() for until in self._resting.values()]
        if result.unavailable and resting:
            return max(0.0, min(min(resting), self.poll_seconds * 10))
        return poll

    def _listen(self, done: threading.Event) -> None:
        connection = connections[self.using]
        try:
            queries_for(connection).listen(
                connection, self.wake, done, retry_seconds=self.poll_seconds, channel=CHANNEL
            )
        except Exception:
            # Never fatal: the relay polls anyway.
            logger.exception("relay listener stopped relay=%s; polling only", self.relay_id)
        finally:
            connection.close()

    def drain(self, *, timeout: float = 30.0) -> RelayStats:
        """Relay until no message is ready, in this thread (tests, the demo); return stats.

        Raise BrokerUnavailable if a broker stays unreachable for ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.relay_once()
            if result.unavailable:
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"broker {', '.join(result.unavailable)} unreachable for {timeout:g} s"
                    )
                time.sleep(min(0.05, self.poll_seconds))
                self._resting.clear()
                continue
            if result.claimed == 0:
                return self.stats

    def relay_once(self, *, look_first: bool = False) -> BatchResult:
        """Claim one batch and publish it; return what happened.

        ``look_first``: an idle relay first asks whether anything is waiting (one read, no
        lock), so that an idle relay costs one query a poll.
        """
        connection = connections[self.using]
        brokers = [name for name in self.brokers if self._resting.get(name, 0) <= time.monotonic()]
        if not brokers:
            return BatchResult(unavailable=sorted(self._resting))
        if look_first and not messages_waiting(connection, brokers):
            return BatchResult()
        token, messages = claim_messages(connection, brokers, self.batch_size, self.lease_seconds)
        result = BatchResult(claimed=len(messages))
        if not messages:
            return result
        self.stats.batches += 1
        deadline = time.monotonic() + self.lease_seconds / 2
        by_broker: dict[str, list[Envelope]] = defaultdict(list)
        for message in messages:
            by_broker[message.broker].append(message)
        for name, batch in by_broker.items():
            sent = self._publish(name, batch, token, deadline)
            result.sent += sent
            if name in self._resting:
                result.unavailable.append(name)
        return result

    def _publish(
        self, name: str, messages: list[Envelope], token: uuid.UUID, deadline: float
    ) -> int:
        """Publish one broker's share of a batch, round by round; record the outcomes."""
        confirmed: list[uuid.UUID] = []
        unsent: list[uuid.UUID] = []
        stopped_keys: set[tuple[str, str]] = set()
        broker = broker_named(name)
        rounds = [messages] if broker.keeps_key_order else _rounds(messages)
        for number, round_ in enumerate(rounds):
            sending = [m for m in round_ if m.key is None or (m.topic, m.key) not in stopped_keys]
            if len(sending) < len(round_):
                # Behind a refused message of their key: they wait for it.
                unsent += [
                    m.id for m in round_ if m.key is not None and (m.topic, m.key) in stopped_keys
                ]
            if not sending:
                continue
            if time.monotonic() > deadline:
                # Past half the lease: another relay may take these over soon.
                unsent += [m.id for later in rounds[number:] for m in later]
                break
            try:
                results = _checked(broker.publish(sending), len(sending))
            except Exception as exc:
                self._broker_failed(name, broker.close, exc)
                unsent += [m.id for later in rounds[number:] for m in later]
                break
            for message, outcome in zip(sending, results, strict=True):
                if outcome is None:
                    confirmed.append(message.id)
                    continue
                stopping = message.key is not None
                if outcome is NOT_SENT or (
                    stopping and (message.topic, message.key) in stopped_keys
                ):
                    # Behind a refused message of its key (sent along with it, and refused for
                    # the same reason): it waits for that one, at no cost.
                    unsent.append(message.id)
                    continue
                if message.key is not None:
                    stopped_keys.add((message.topic, message.key))
                self._refused(message, outcome, token)
        else:
            self._broker_works(name)
        self.stats.released += len(unsent)
        self.stats.sent += len(confirmed)
        self.stats.by_broker[name] += len(confirmed)

        def record() -> None:
            if unsent:
                outcomes.released(self.using, token, unsent)
            if not confirmed:
                return
            done = outcomes.confirmed(self.using, token, confirmed, keep=self.keep_sent)
            if done < len(confirmed):
                logger.warning(
                    "relay lost its lease relay=%s broker=%s confirmed=%s recorded=%s; the rest "
                    "may be published again",
                    self.relay_id,
                    name,
                    len(confirmed),
                    done,
                )

        if self._writer is not None:
            self._writer.submit(record)
        else:
            record()
        return len(confirmed)

    def _refused(self, message: Envelope, refusal: Refusal, token: uuid.UUID) -> None:
        attempts = message.attempts + 1
        block = refusal.permanent or attempts >= self.max_refusals
        self.stats.refused += 1
        self.stats.blocked += block
        logger.warning(
            "message refused relay=%s broker=%s topic=%s key=%s id=%s attempts=%s blocked=%s "
            "reason=%s",
            self.relay_id,
            message.broker,
            message.topic,
            message.key,
            message.id,
            attempts,
            block,
            refusal.reason,
        )
        outcomes.refused(
            self.using,
            token,
            message.id,
            attempts,
            refusal.reason,
            block=block,
            retry_in=self.retry_seconds,
        )

    def _broker_failed(self, name: str, close: Callable[[], None], exc: BaseException) -> None:
        errors = self._broker_errors.get(name)
        if errors is None:
            errors = self._broker_errors[name] = ErrorBackoff(
                f"publishing to broker {name} relay={self.relay_id}",
                logger,
                first_delay=self.poll_seconds,
                max_delay=MAX_BACKOFF,
            )
        self._resting[name] = time.monotonic() + errors.failed(exc)
        try:
            close()
        except Exception:  # A broken client may fail to close in any way; a new one replaces it.
            logger.debug("closing broker %s failed", name, exc_info=True)

    def _broker_works(self, name: str) -> None:
        self._resting.pop(name, None)
        errors = self._broker_errors.get(name)
        if errors is not None and errors.failing:
            errors.succeeded()


class OutcomeWriter:
    """Write each batch's outcomes on a thread (and connection) of its own, so that the relay
    claims and sends the next batch meanwhile. At most one batch waits: the relay never runs
    far ahead of what is recorded.

    A write that fails (the database is down) is logged and dropped: its messages keep their
    lease until it expires and are published again, which consumers drop by id.
    """

    def __init__(self, using: str, relay_id: str) -> None:
        self.using = using
        self.relay_id = relay_id
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._run, name="outbox-relay-writer", daemon=True)
        self._thread.start()

    def submit(self, write: Callable[[], None]) -> None:
        self._queue.put(write)

    def flush(self) -> None:
        """Return once every submitted write is done."""
        self._queue.join()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(30)

    def _run(self) -> None:
        try:
            while (write := self._queue.get()) is not None:
                try:
                    write()
                except DatabaseError:
                    logger.exception(
                        "recording a batch failed relay=%s; its messages will be published "
                        "again when their lease expires",
                        self.relay_id,
                    )
                    connections[self.using].close()
                finally:
                    self._queue.task_done()
        finally:
            self._queue.task_done()
            connections[self.using].close()


def _rounds(messages: Sequence[Envelope]) -> list[list[Envelope]]:
    """Split a batch (in id order) into rounds: round n holds each key's n-th message; the
    keyless ones all go in the first."""
    rounds: list[list[Envelope]] = []
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for message in messages:
        if message.key is None:
            number = 0
        else:
            slot = (message.topic, message.key)
            number = seen[slot]
            seen[slot] += 1
        while len(rounds) <= number:
            rounds.append([])
        rounds[number].append(message)
    return rounds


def _checked(results: Sequence[Outcome], expected: int) -> list[Outcome]:
    if len(results) != expected:
        raise BrokerUnavailable(
            f"the broker adapter returned {len(results)} outcomes for {expected} messages"
        )
    return list(results)
