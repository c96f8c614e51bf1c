"""The relay: claims committed messages in short transactions and publishes them with confirms.

One ``Relay`` runs in a thread of ``run_outbox_worker`` (or alone, ``--relay-only``). Each
pass claims a batch (``db.messages.claim_messages``: id order, one relay at a time per key),
publishes it with no database transaction open, and then deletes the confirmed messages (or
marks them sent), fenced by the claim's lease token. Behind a backlog, three batches are under
way at once, each on a thread and connection of its own: the next one is claimed while this one
is sent and the last one's outcomes are written (``OutcomeWriter``), so that the database's
round trips overlap the broker's instead of adding up. Adapters that keep a key's order within a
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
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial

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
#: How often an idle relay waiting for its last batch's outcomes to be written checks them.
FLUSH_LOOK_SECONDS = 0.01
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


@dataclass
class ClaimedBatch:
    """A claim's messages, its lease token, and when sending them must stop (half the lease
    after the claim began: time.monotonic())."""

    token: uuid.UUID
    messages: list[Envelope]
    deadline: float
    #: The token of the batch it was claimed behind, sent before it (None: claimed alone).
    behind: uuid.UUID | None = None


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
        # The last batch sent: its token, and the keys (broker, topic, key) it left with a
        # message unconfirmed, whose later messages in a batch claimed behind it must wait.
        self._last_sent: uuid.UUID | None = None
        self._last_sent_stops: set[tuple[str, str, str]] = set()

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
        # The next batch, claimed behind this one while it is sent (behind a backlog only).
        ahead: Future[ClaimedBatch | None] | None = None
        idle = True
        # Whether the relay looks before claiming: an idle relay that wakes up to poll does
        # (one read); woken by a commit, it claims at once (one round trip less).
        look_first = True
        idle_poll = self.poll_seconds
        if queries_for(connections[self.using]).listens:
            idle_poll = max(self.poll_seconds, LISTENING_POLL_SECONDS)
        try:
            while not self._stop.is_set():
                self._wake.clear()
                try:
                    if ahead is not None:
                        claiming, ahead = ahead, None
                        batch = claiming.result()
                    else:
                        batch = self._claim(look_first=look_first)
                    if batch is not None and self._may_claim_behind(batch):
                        ahead = self._writer.claim(partial(self._claim_ahead, batch.token))
                    result = self._send(batch)
                    if self._housekeeping is not None:
                        self._housekeeping.maybe_prune()
                except DatabaseError as exc:
                    connections[self.using].close()
                    self._wake.wait(self._database_errors.failed(exc))
                    look_first = True
                    continue
                self._database_errors.succeeded()
                idle = result.claimed == 0 and ahead is None
                # The last batch's outcomes may have been written only after this claim read
                # the table: their rows still held their keys then, and the keys' next
                # messages were left. Look again once they are written, before resting (a
                # message committed just behind its key's last one would wait a whole poll).
                if idle and self._writer.flush(interrupt=self._wake):
                    look_first = False
                    continue
                look_first = False
                if ahead is not None or (
                    result.claimed >= self.batch_size and not result.unavailable
                ):
                    continue
                woken = self._wake.wait(
                    self._pause(result, idle_poll if idle else self.poll_seconds)
                )
                look_first = idle and not woken
        finally:
            wakeups.unsubscribe(self.wake)
            listener_done.set()
            if ahead is not None:
                self._hand_back(ahead)
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
        return self._send(self._claim(look_first=look_first))

    def _claim(
        self, *, look_first: bool = False, behind: uuid.UUID | None = None
    ) -> ClaimedBatch | None:
        """Claim a batch of the brokers not resting after a failure (None: every one rests).

        ``behind``: the token of the batch this relay sends meanwhile (see ``claim_messages``).
        """
        connection = connections[self.using]
        brokers = [name for name in self.brokers if self._resting.get(name, 0) <= time.monotonic()]
        if not brokers:
            return None
        # Measured from before the claim: the lease runs from its statement on.
        deadline = time.monotonic() + self.lease_seconds / 2
        if look_first and not messages_waiting(connection, brokers):
            return ClaimedBatch(uuid.uuid4(), [], deadline)
        token, messages = claim_messages(
            connection, brokers, self.batch_size, self.lease_seconds, own=behind
        )
        return ClaimedBatch(token, messages, deadline, behind)

    def _may_claim_behind(self, batch: ClaimedBatch) -> bool:
        """Whether to claim the next batch while ``batch`` is sent: behind a backlog (a full
        batch), and unless the batch sent before it left a key unconfirmed. Then its keys'
        next messages, claimed behind it, are handed back when ``batch`` is sent; claimed
        behind ``batch`` as well, they would be handed back again, batch after batch: the
        claim after it reads what the database holds, and the key goes on in order."""
        return (
            len(batch.messages) >= self.batch_size
            and not self._stop.is_set()
            and not self._last_sent_stops
            # A batch claimed while a broker rests would be handed back, and claimed again.
            and not self._resting
            and self._writer is not None
        )

    def _claim_ahead(self, behind: uuid.UUID) -> ClaimedBatch | None:
        """``_claim`` on the writer's thread (its connection is its own), after the outcomes
        written before it: the keys they free are free to it."""
        try:
            return self._claim(behind=behind)
        except DatabaseError:
            connections[self.using].close()
            raise

    def _hand_back(self, claiming: Future[ClaimedBatch | None]) -> None:
        """Release a batch claimed ahead that will not be sent (the relay stops)."""
        try:
            batch = claiming.result()
            if batch is not None and batch.messages:
                outcomes.released(self.using, batch.token, [m.id for m in batch.messages])
                self.stats.released += len(batch.messages)
        except DatabaseError:
            logger.warning(
                "handing back a batch failed relay=%s; its messages wait for their lease to expire",
                self.relay_id,
                exc_info=True,
            )

    def _send(self, batch: ClaimedBatch | None) -> BatchResult:
        """Publish a claimed batch, broker by broker; return what happened."""
        if batch is None:
            return BatchResult(unavailable=sorted(self._resting))
        result = BatchResult(claimed=len(batch.messages))
        if not batch.messages:
            return result
        self.stats.batches += 1
        waiting: set[tuple[str, str, str]] = set()
        if batch.behind is not None:
            # Claimed while the batch before was sent: a key that batch left unconfirmed
            # sends nothing more here (its messages are handed back, to go in order).
            # (The batch before is always the one it was claimed behind; were it not, every
            # key would wait.)
            waiting = (
                self._last_sent_stops
                if batch.behind == self._last_sent
                else {(m.broker, m.topic, m.key) for m in batch.messages if m.key is not None}
            )
        # Until this batch's outcomes are known, each of its keys counts as unconfirmed (an
        # error may end the sending halfway).
        self._last_sent = batch.token
        self._last_sent_stops = {
            (m.broker, m.topic, m.key) for m in batch.messages if m.key is not None
        }
        by_broker: dict[str, list[Envelope]] = defaultdict(list)
        held_back: dict[str, list[uuid.UUID]] = defaultdict(list)
        for message in batch.messages:
            if message.key is not None and (message.broker, message.topic, message.key) in waiting:
                held_back[message.broker].append(message.id)
            else:
                by_broker[message.broker].append(message)
        confirmed: set[uuid.UUID] = set()
        for name in sorted(by_broker.keys() | held_back.keys()):
            messages = by_broker.get(name, [])
            if messages and self._resting.get(name, 0) > time.monotonic():
                # It failed while this batch was claimed ahead: the batch waits, at no cost.
                held_back[name] += [m.id for m in messages]
                result.unavailable.append(name)
                messages = []
            if messages:
                whole = not held_back.get(name)
                sent = self._publish(name, messages, batch.token, batch.deadline, whole=whole)
                confirmed.update(sent)
                result.sent += len(sent)
                if name in self._resting:
                    result.unavailable.append(name)
            if held_back.get(name):
                self.stats.released += len(held_back[name])
                self._record(name, batch.token, [], held_back[name])
        self._last_sent_stops = {
            (m.broker, m.topic, m.key)
            for m in batch.messages
            if m.key is not None and m.id not in confirmed
        }
        return result

    def _publish(
        self,
        name: str,
        messages: list[Envelope],
        token: uuid.UUID,
        deadline: float,
        *,
        whole: bool = False,
    ) -> list[uuid.UUID]:
        """Publish one broker's share of a batch, round by round; record the outcomes; return
        the ids the broker confirmed.

        ``whole``: ``messages`` are all of the batch's messages of this broker (none held
        back), in id order."""
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
        # Every message of the share confirmed: deleted by the range of their ids.
        span = (
            (messages[0].id, messages[-1].id) if whole and len(confirmed) == len(messages) else None
        )
        self._record(name, token, confirmed, unsent, span=span)
        return confirmed

    def _record(
        self,
        name: str,
        token: uuid.UUID,
        confirmed: list[uuid.UUID],
        unsent: list[uuid.UUID],
        *,
        span: tuple[uuid.UUID, uuid.UUID] | None = None,
    ) -> None:
        """Delete (or mark) the confirmed messages and hand back the unsent ones: on the
        writer's thread while running, here otherwise.

        ``span``: the first and last id of the claim's messages of this broker, when
        ``confirmed`` holds them all: one range of the primary key finds them, where a list of
        ids descends the index once per id."""

        def record() -> None:
            if unsent:
                outcomes.released(self.using, token, unsent)
            if not confirmed:
                return
            if span is not None:
                first, last = span
                done = outcomes.confirmed_claim(
                    self.using, token, name, first, last, keep=self.keep_sent
                )
            else:
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
        # Writes submitted since the last flush (by the relay's thread only).
        self._submitted = 0
        self._thread = threading.Thread(target=self._run, name="outbox-relay-writer", daemon=True)
        self._thread.start()

    def submit(self, write: Callable[[], None]) -> None:
        self._submitted += 1
        self._queue.put(write)

    def claim(self, claim: Callable[[], ClaimedBatch | None]) -> Future[ClaimedBatch | None]:
        """Run ``claim`` on this thread after the writes submitted before it (the keys they
        free are free to it); return its future."""
        future: Future[ClaimedBatch | None] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(claim())
                except BaseException as exc:  # Handed to the relay's thread, which handles it.
                    future.set_exception(exc)

        self._queue.put(run)
        return future

    def flush(self, interrupt: threading.Event) -> bool:
        """Return once every submitted write is done, or sooner once ``interrupt`` is set
        (a message committed meanwhile: claim it now, rather than after a slow write).

        Return whether to look again: writes were submitted since the last flush that saw
        them all done (the keys their rows held are free now), or some are still pending.
        """
        # A queue's join() cannot be cut short: look at what is unfinished between waits for
        # the interrupt (an idle relay only, so the polling costs nothing while it works).
        while self._queue.unfinished_tasks:
            if interrupt.wait(FLUSH_LOOK_SECONDS):
                return True
        submitted, self._submitted = self._submitted, 0
        return submitted > 0

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
