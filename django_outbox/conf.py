"""The ``OUTBOX`` setting, read lazily and again after ``override_settings`` changes it.

Its defaults and validation are in ``validation.setting``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .validation.bounds import PREFETCH_AUTO
from .validation.relay import RELAY_DEFAULTS
from .validation.setting import DEFAULTS, setting_errors


@dataclass(frozen=True)
class QueueOptions:
    """Defaults that apply to every task of one queue."""

    max_attempts: int
    retry: dict[str, float]
    priority: int
    # The most jobs that may wait (ready or retrying) in the queue; None: no bound.
    max_size: int | None = None
    # Hold the queue's due retries back until the next poll when a retry fails again.
    pace_retries: bool = True
    # Concurrency caps and rate limits ("10/s") across every worker: of the whole queue, and
    # of each limit key's jobs in it (django_outbox.limits). None: no such limit.
    concurrency: int | None = None
    concurrency_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None

    @property
    def limited(self) -> bool:
        """Whether the queue declares a concurrency cap or a rate limit."""
        return any(
            value is not None
            for value in (
                self.concurrency,
                self.concurrency_per_key,
                self.rate_limit,
                self.rate_limit_per_key,
            )
        )


@dataclass(frozen=True)
class RelayOptions:
    """How the relay publishes messages (``OUTBOX["RELAY"]``)."""

    batch_size: int = RELAY_DEFAULTS["BATCH_SIZE"]
    lease_seconds: float = RELAY_DEFAULTS["LEASE_SECONDS"]
    poll_seconds: float = RELAY_DEFAULTS["POLL_SECONDS"]
    retry_seconds: float = RELAY_DEFAULTS["RETRY_SECONDS"]
    max_refusals: int = RELAY_DEFAULTS["MAX_REFUSALS"]
    # Seconds confirmed messages are kept; None: deleted at once.
    retention: float | None = RELAY_DEFAULTS["RETENTION"]
    inbox_retention: float = RELAY_DEFAULTS["INBOX_RETENTION"]


def _prefetch(value: Any) -> int | Literal["auto"]:
    """Return a validated ``PREFETCH``: "auto", or a number of jobs."""
    return PREFETCH_AUTO if value == PREFETCH_AUTO else int(value)


#: The most queues whose options ``OutboxSettings.queue_options`` keeps.
QUEUE_OPTIONS_CACHED = 1024


@dataclass(frozen=True)
class OutboxSettings:
    """The validated, merged ``OUTBOX`` setting."""

    database: str
    default_queue: str
    lease_seconds: float
    heartbeat_seconds: float
    poll_seconds: float
    max_attempts: int
    retry: dict[str, float]
    error_history: int
    concurrency: int
    processes: int
    shutdown_timeout: float
    prefetch: int | Literal["auto"]
    retention: dict[str, float | None]
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    context: tuple[str, ...] = ()
    codec: str | None = None
    cron: dict[str, dict[str, Any]] = field(default_factory=dict)
    cron_timezone: str = "UTC"
    health: dict[str, float] = field(default_factory=lambda: dict(DEFAULTS["HEALTH"]))
    # Broker name -> {"BACKEND": dotted path, "OPTIONS": {...}}.
    brokers: dict[str, dict[str, Any]] = field(default_factory=dict)
    relay: RelayOptions = field(default_factory=RelayOptions)
    # queue_options' answers: every enqueue asks them, and settings don't change once read.
    _queue_options: dict[str, QueueOptions] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def queue_options(self, queue: str) -> QueueOptions:
        """Return the defaults for ``queue``: its own options over the global ones."""
        options = self._queue_options.get(queue)
        if options is None:
            own = self.queues.get(queue, {})
            options = QueueOptions(
                max_attempts=own.get("MAX_ATTEMPTS", self.max_attempts),
                retry={**self.retry, **own.get("RETRY", {})},
                priority=own.get("PRIORITY", 0),
                max_size=own.get("MAX_SIZE"),
                pace_retries=own.get("PACE_RETRIES", True),
                concurrency=own.get("CONCURRENCY"),
                concurrency_per_key=own.get("CONCURRENCY_PER_KEY"),
                rate_limit=own.get("RATE_LIMIT"),
                rate_limit_per_key=own.get("RATE_LIMIT_PER_KEY"),
            )
            # Bounded: a project may name queues at run time (one per tenant, say).
            if len(self._queue_options) < QUEUE_OPTIONS_CACHED:
                self._queue_options[queue] = options
        return options


_cached: OutboxSettings | None = None


def user_settings() -> Any:
    """Return ``settings.OUTBOX`` as given (an empty dict when unset), valid or not."""
    return getattr(settings, "OUTBOX", {})


def get_settings() -> OutboxSettings:
    """Return the merged settings, built on first use and after every change to ``OUTBOX``."""
    global _cached
    if _cached is None:
        _cached = _build(user_settings())
    return _cached


def _build(user: Any) -> OutboxSettings:
    # The system checks report bad values with hints; this guard keeps code that runs without
    # checks (a script, a test) from carrying on with a value the checks would reject.
    errors = setting_errors(user)
    if errors:
        raise ImproperlyConfigured(f"settings.OUTBOX is invalid: {errors[0].msg} {errors[0].hint}")
    merged = {**DEFAULTS, **user}
    return OutboxSettings(
        database=merged["DATABASE"],
        default_queue=merged["DEFAULT_QUEUE"],
        lease_seconds=float(merged["LEASE_SECONDS"]),
        heartbeat_seconds=float(merged["HEARTBEAT_SECONDS"]),
        poll_seconds=float(merged["POLL_SECONDS"]),
        max_attempts=int(merged["MAX_ATTEMPTS"]),
        retry={**DEFAULTS["RETRY"], **user.get("RETRY", {})},
        error_history=int(merged["ERROR_HISTORY"]),
        concurrency=int(merged["CONCURRENCY"]),
        processes=int(merged["PROCESSES"]),
        shutdown_timeout=float(merged["SHUTDOWN_TIMEOUT"]),
        prefetch=_prefetch(merged["PREFETCH"]),
        retention={**DEFAULTS["RETENTION"], **user.get("RETENTION", {})},
        queues=dict(merged["QUEUES"]),
        context=tuple(merged["CONTEXT"]),
        codec=merged["CODEC"],
        cron=dict(merged["CRON"]),
        cron_timezone=merged["CRON_TIMEZONE"],
        health={
            key: float(value)
            for key, value in {**DEFAULTS["HEALTH"], **user.get("HEALTH", {})}.items()
        },
        brokers=dict(merged["BROKERS"]),
        relay=_relay_options({**RELAY_DEFAULTS, **merged["RELAY"]}),
    )


def _relay_options(relay: dict[str, Any]) -> RelayOptions:
    retention = relay["RETENTION"]
    return RelayOptions(
        batch_size=int(relay["BATCH_SIZE"]),
        lease_seconds=float(relay["LEASE_SECONDS"]),
        poll_seconds=float(relay["POLL_SECONDS"]),
        retry_seconds=float(relay["RETRY_SECONDS"]),
        max_refusals=int(relay["MAX_REFUSALS"]),
        retention=None if retention is None else float(retention),
        inbox_retention=float(relay["INBOX_RETENTION"]),
    )


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting == "OUTBOX":
        _cached = None
