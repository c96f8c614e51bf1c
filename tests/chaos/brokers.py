"""Private brokers for the relay's fault tests: servers of the test's own, which it may kill.

Each is a redis-server, a nats-server with JetStream or a RabbitMQ node with its own port and
directory under the test's tmp dir: the machine's shared brokers serve other tests and must
never restart. Each reads back what it received as a ledger of ``(message id, key, seq)``, in
the order the broker stored the messages.

A private RabbitMQ node boots in 3.5 to 5 CPU seconds (4 to 19 s of wall time on a loaded
2-core machine), a restart after SIGKILL as long: it runs without a config file (its port and
address come from the environment, which spares it cuttlefish's translation, about a CPU second),
without plugins, and with an epmd of its own, so that its node name clashes with nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import IO, Any, ClassVar

from django_outbox import receive_once
from tests.testapp.models import Note

#: What a ledger holds, one entry per message the broker stored: id, key, payload's "seq".
Entry = tuple[str, str, int]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


class PrivateBroker:
    """A broker server of one test's own, which it may kill and start again."""

    #: The broker's name in figures, its server's program (the test skips where it is
    #: missing), the adapter, the topic.
    name: ClassVar[str]
    program: ClassVar[str]
    backend: ClassVar[str]
    topic: ClassVar[str] = "chaos"
    #: How long a start may take before the test fails.
    start_timeout: ClassVar[float] = 10

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def installed(cls) -> bool:
        return shutil.which(cls.program) is not None

    def options(self) -> dict[str, Any]:
        """The adapter's OPTIONS, with short timeouts: a dead broker is noticed at once."""
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> float:
        """Start the server and wait until it serves; return how long that took (seconds)."""
        began = time.monotonic()
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # A group of its own: kill() reaches every process the server starts.
            start_new_session=True,
        )
        deadline = began + self.start_timeout
        while not self.serves():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the private {self.program} did not start")
            time.sleep(0.05)
        self.prepare()
        return time.monotonic() - began

    def serves(self) -> bool:
        return answers(self.port)

    def prepare(self) -> None:
        """Create what the topic needs (a stream, a queue): kept across restarts."""

    def kill(self) -> None:
        """SIGKILL the server, as a crash or an OOM kill would, and wait until it is gone."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None
        # Grandchildren (a RabbitMQ node's VM) are not this process's to wait for: gone once
        # their port no longer answers.
        deadline = time.monotonic() + 10
        while answers(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        """Kill the server and whatever else the test started for it."""
        self.kill()

    def ledger(self) -> list[Entry]:
        raise NotImplementedError


class PrivateRedis(PrivateBroker):
    """A redis-server whose append-only file is fsynced at every write."""

    name = "redis"
    program = "redis-server"
    backend = "django_outbox.relay.brokers.redis.RedisStreams"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def options(self) -> dict[str, Any]:
        return {"url": self.url, "socket_timeout": 2}

    def command(self) -> list[str]:
        return [
            "redis-server",
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)),
            *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
        ]

    def ledger(self) -> list[Entry]:
        import redis

        client = redis.Redis.from_url(self.url)
        entries: Any = client.xrange(self.topic)
        client.close()
        return [
            (fields[b"id"].decode(), fields[b"key"].decode(), json.loads(fields[b"payload"])["seq"])
            for _entry, fields in entries
        ]


class PrivateNats(PrivateBroker):
    """A nats-server with JetStream, with one stream for the topic."""

    name = "nats"
    program = "nats-server"
    backend = "django_outbox.relay.brokers.nats.NatsJetStream"
    STREAM = "chaos"
    topic = f"{STREAM}.events"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def options(self) -> dict[str, Any]:
        return {"servers": [self.url], "timeout": 2}

    def command(self) -> list[str]:
        return [
            *("nats-server", "-js", "-a", "127.0.0.1"),
            *("-p", str(self.port), "-sd", str(self.directory)),
        ]

    def prepare(self) -> None:
        asyncio.run(self._add_stream())

    async def _add_stream(self) -> None:
        import nats

        client = await nats.connect(self.url)
        try:
            jetstream = client.jetstream()
            try:
                await jetstream.stream_info(self.STREAM)
            except Exception:  # No such stream yet.
                await jetstream.add_stream(name=self.STREAM, subjects=[f"{self.STREAM}.>"])
        finally:
            await client.close()

    def ledger(self) -> list[Entry]:
        entries: list[Entry] = asyncio.run(self._read())
        return entries

    async def _read(self) -> list[Entry]:
        import nats

        client = await nats.connect(self.url)
        try:
            jetstream = client.jetstream()
            info = await jetstream.stream_info(self.STREAM)
            entries = []
            for sequence in range(info.state.first_seq, info.state.last_seq + 1):
                message = await jetstream.get_msg(self.STREAM, sequence)
                headers = message.headers or {}
                entries.append(
                    (
                        headers["Nats-Msg-Id"],
                        headers.get("message-key", ""),
                        json.loads(message.data or b"{}")["seq"],
                    )
                )
            return entries
        finally:
            await client.close()


class PrivateRabbitMQ(PrivateBroker):
    """A RabbitMQ node with one durable classic queue for the topic (the default exchange
    routes to it by name); its persistent messages are confirmed once written to disk."""

    name = "rabbitmq"
    program = "rabbitmq-server"
    backend = "django_outbox.relay.brokers.rabbitmq.RabbitMQ"
    # A first boot creates the node's database; on a loaded machine either takes seconds.
    start_timeout = 120
    #: The server script itself: Debian's /usr/sbin/rabbitmq-server only switches to the
    #: rabbitmq user, who may not write to the test's tmp dir.
    SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.distribution_port = free_port()
        self.epmd_port = free_port()
        self.epmd: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        (directory / "rabbitmq-env.conf").write_text("")
        (directory / "enabled_plugins").write_text("[].\n")

    @classmethod
    def installed(cls) -> bool:
        return cls.SCRIPT.exists() and shutil.which("epmd") is not None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def options(self) -> dict[str, Any]:
        return {"url": self.url, "timeout": 2}

    def command(self) -> list[str]:
        return [str(self.SCRIPT)]

    def environment(self) -> dict[str, str]:
        directory = self.directory
        env = {key: value for key, value in os.environ.items() if not key.startswith("RABBITMQ_")}
        # The machine's /etc/rabbitmq sets ERL_FLAGS for the shared node.
        env.pop("ERL_FLAGS", None)
        env.update(
            # The Erlang cookie is written to $HOME.
            HOME=str(directory),
            RABBITMQ_CONF_ENV_FILE=str(directory / "rabbitmq-env.conf"),
            # Neither file exists: no config to translate (the environment says it all).
            RABBITMQ_CONFIG_FILE=str(directory / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(directory / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(directory / "enabled_plugins"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(directory / "plugins"),
            RABBITMQ_NODENAME="outbox-chaos@localhost",
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.distribution_port),
            RABBITMQ_MNESIA_BASE=str(directory / "mnesia"),
            RABBITMQ_LOG_BASE=str(directory / "log"),
            RABBITMQ_PID_FILE=str(directory / "rabbitmq.pid"),
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
        )
        return env

    def start(self) -> float:
        began = time.monotonic()
        environment = self.environment()
        if self.epmd is None:
            # The node's name server, started once: the node would start one as a daemon,
            # which nothing would stop.
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while not answers(self.epmd_port):
                if time.monotonic() > deadline:
                    raise RuntimeError("the private epmd did not start")
                time.sleep(0.05)
        self._log = (self.directory / "rabbitmq-server.out").open("ab")
        self.process = subprocess.Popen(
            self.command(),
            env=environment,
            cwd=self.directory,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = began + self.start_timeout
        while not self.serves():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                tail = (self.directory / "rabbitmq-server.out").read_text(errors="replace")
                raise RuntimeError(f"the private RabbitMQ node did not start:\n{tail[-3000:]}")
            time.sleep(0.1)
        self.prepare()
        return time.monotonic() - began

    def serves(self) -> bool:
        # The port opens before the node accepts logins: a login says it serves.
        import pika
        import pika.exceptions

        if not answers(self.port):
            return False
        try:
            pika.BlockingConnection(self._parameters()).close()
        except (pika.exceptions.AMQPError, OSError):
            return False
        return True

    def _parameters(self) -> Any:
        import pika

        parameters = pika.URLParameters(self.url)
        parameters.socket_timeout = 5
        parameters.connection_attempts = 1
        return parameters

    def prepare(self) -> None:
        import pika

        connection = pika.BlockingConnection(self._parameters())
        try:
            connection.channel().queue_declare(self.topic, durable=True)
        finally:
            connection.close()

    def kill(self) -> None:
        super().kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.kill()
        if self.epmd is not None:
            self.epmd.kill()
            self.epmd.wait(10)
            self.epmd = None

    def ledger(self) -> list[Entry]:
        import pika

        connection = pika.BlockingConnection(self._parameters())
        try:
            channel = connection.channel()
            waiting = channel.queue_declare(self.topic, durable=True).method.message_count
            channel.basic_qos(prefetch_count=1000)
            entries: list[Entry] = []
            for method, properties, body in channel.consume(
                self.topic, auto_ack=True, inactivity_timeout=10
            ):
                if method is None:
                    break
                headers = properties.headers or {}
                entries.append(
                    (properties.message_id, headers.get("message-key", ""), json.loads(body)["seq"])
                )
                if len(entries) == waiting:
                    break
            channel.cancel()
            return entries
        finally:
            connection.close()


#: The private brokers by name.
BROKERS: dict[str, type[PrivateBroker]] = {
    broker.name: broker for broker in (PrivateNats, PrivateRabbitMQ, PrivateRedis)
}


def check_ledger(ledger: list[Entry], published: list[str]) -> dict[str, int]:
    """Count what a broker's ledger shows of ``published`` (ids, in publish order): messages
    lost, per-key order violations among first deliveries, duplicates, and duplicate effects
    when every delivery goes through ``receive_once``."""
    received = Counter(message_id for message_id, _key, _seq in ledger)
    lost = set(published) - set(received)
    duplicates = sum(count - 1 for count in received.values())
    # Each key's first deliveries, in the broker's order, carry increasing sequence numbers.
    seen: set[str] = set()
    last: dict[str, int] = defaultdict(lambda: -1)
    violations = 0
    for message_id, key, seq in ledger:
        if message_id in seen:
            continue
        seen.add(message_id)
        violations += seq < last[key]
        last[key] = max(last[key], seq)
    # The consumer: every delivery through receive_once, redeliveries included.
    effects_before = Note.objects.count()
    for message_id, _key, seq in ledger:
        with receive_once("chaos-consumer", message_id) as first:
            if first:
                Note.objects.create(text=str(seq))
    effects = Note.objects.count() - effects_before
    return {
        "lost": len(lost),
        "order_violations": violations,
        "duplicates": duplicates,
        "duplicate_effects": effects - len(received),
    }
