"""The ``OUTBOX`` setting: its defaults, and lazy access that follows ``override_settings``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

#: Every key of ``settings.OUTBOX`` with its default. ``docs/configuration.md`` explains each;
#: the allowed range of each number is in ``checks.py``.
DEFAULTS: dict[str, Any] = {
    # The database alias whose connection enqueues and claims jobs. Enqueue joins the caller's
    # atomic block only when the caller's block is on this alias.
    "DATABASE": "default",
    # Queue of tasks that name none.
    "DEFAULT_QUEUE": "default",
    # How long a claim holds a job before another worker may take it over.
    "LEASE_SECONDS": 60.0,
    # How often a worker extends the leases of the jobs it holds: at most a third of the lease.
    "HEARTBEAT_SECONDS": 10.0,
    # How long an idle worker sleeps between looks for runnable jobs.
    "POLL_SECONDS": 1.0,
    # Attempts a job gets (the first run counts) before it is marked failed.
    "MAX_ATTEMPTS": 20,
    # Exponential backoff between attempts; see django_outbox.retry.RetryPolicy.
    "RETRY": {"BASE_DELAY": 1.0, "FACTOR": 2.0, "MAX_DELAY": 3600.0, "JITTER": 0.1},
    # How many past attempts' errors each job keeps (the newest win).
    "ERROR_HISTORY": 10,
    # Worker defaults, overridable by run_outbox_worker's options.
    "CONCURRENCY": 4,
    "PROCESSES": 1,
    "SHUTDOWN_TIMEOUT": 30.0,
    # Jobs a worker claims beyond its free threads, so that threads never wait for a claim and
    # claims are batched. Such jobs wait in the worker (leased), not for another worker: keep
    # it 0 for long jobs, raise it for many short ones.
    "PREFETCH": 0,
    # How long finished jobs are kept, in seconds (None: forever). Workers delete older ones in
    # small batches; the claim never reads them either way (partial indexes).
    "RETENTION": {"SUCCEEDED": 86400.0, "FAILED": 7 * 86400.0, "CANCELLED": 7 * 86400.0},
    # Dotted paths of contextvars.ContextVar objects (a request id, a log context) captured
    # at enqueue and set again around the job's run in the worker.
    "CONTEXT": [],
    # Dotted path of the codec of tasks that name none (see django_outbox.codecs); None: the
    # payload is stored as it is, by the built-in JSON rules.
    "CODEC": None,
    # Per-queue options: {"emails": {"MAX_ATTEMPTS": 5, "RETRY": {...}, "PRIORITY": 0,
    # "MAX_SIZE": 10000, "PACE_RETRIES": True}}. MAX_SIZE bounds the jobs waiting in the queue
    # (enqueue raises QueueFull beyond it; no bound by default); PACE_RETRIES (default True)
    # holds the queue's due retries back until the next poll once a retry fails again.
    "QUEUES": {},
    # Periodic tasks beside those declared with @task(cron=...), by name: {"nightly-cleanup":
    # {"TASK": "myapp.tasks.cleanup", "SCHEDULE": "0 3 * * *", "PAYLOAD": {...}, "QUEUE": ...,
    # "PRIORITY": ..., "TIMEZONE": ...}}. See docs/cron.md.
    "CRON": {},
    # The time zone of cron expressions whose entry names none (an IANA name).
    "CRON_TIMEZONE": "UTC",
    # When a worker whose claims or heartbeats fail with database errors counts as unhealthy
    # (django_outbox.healthy(), manage.py outbox_health): once in error for longer than
    # ALLOWED_ERROR_SECONDS, and not in its first GRACE_SECONDS.
    "HEALTH": {"ALLOWED_ERROR_SECONDS": 60.0, "GRACE_SECONDS": 120.0},
}

RETRY_KEYS = frozenset(DEFAULTS["RETRY"])
RETENTION_KEYS = frozenset(DEFAULTS["RETENTION"])
HEALTH_KEYS = frozenset(DEFAULTS["HEALTH"])
QUEUE_KEYS = frozenset({"MAX_ATTEMPTS", "RETRY", "PRIORITY", "MAX_SIZE", "PACE_RETRIES"})


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
    prefetch: int
    retention: dict[str, float | None]
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    context: tuple[str, ...] = ()
    codec: str | None = None
    cron: dict[str, dict[str, Any]] = field(default_factory=dict)
    cron_timezone: str = "UTC"
    health: dict[str, float] = field(default_factory=lambda: dict(DEFAULTS["HEALTH"]))
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
    from .checks import outbox_setting_errors

    errors = outbox_setting_errors(user)
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
        prefetch=int(merged["PREFETCH"]),
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
    )


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting == "OUTBOX":
        _cached = None
