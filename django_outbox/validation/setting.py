"""The ``OUTBOX`` setting: every key's default, and what makes the whole setting valid.

``setting_errors`` is the one validation of the setting: the system checks report its errors
(with ids and hints), and ``conf`` refuses to build settings from a value it faults. Cron
entries' fields are checked by ``schedules``; whether their tasks exist, by ``cron.checks``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from .bounds import (
    HEALTH_RANGES,
    HEARTBEATS_PER_LEASE,
    PREFETCH_AUTO,
    RANGES,
    RETENTION_RANGE,
    RETRY_RANGES,
    max_attempts_error,
    max_size_error,
    prefetch_error,
    priority_error,
)
from .limits import LIMIT_OPTIONS, limit_error
from .loaders import codec_setting_error, context_variable_error
from .relay import brokers_errors, relay_errors
from .schedules import cron_setting_errors
from .text import brief, queue_name_error

#: Every key of ``settings.OUTBOX`` with its default. ``docs/configuration.md`` explains each;
#: the allowed range of each number is in ``bounds``.
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
    # claims are batched. Such jobs wait in the worker (leased), not for another worker: 0 suits
    # long jobs, a hundred many short ones. "auto" claims up to CONCURRENCY ahead while recent
    # jobs ran shorter than 0.1 s, none otherwise (worker.auto_prefetch).
    "PREFETCH": PREFETCH_AUTO,
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
    # CONCURRENCY and RATE_LIMIT ("10/s") cap the queue's jobs across every worker;
    # CONCURRENCY_PER_KEY and RATE_LIMIT_PER_KEY each limit key's (docs/limits.md).
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
    # The message brokers publish() writes for, by name: {"default": {"BACKEND":
    # "django_outbox.relay.brokers.redis.RedisStreams", "OPTIONS": {...}}}. See docs/relay.md.
    "BROKERS": {},
    # The relay's options (validation.relay.RELAY_DEFAULTS has each with its default).
    "RELAY": {},
}

RETRY_KEYS = frozenset(DEFAULTS["RETRY"])
RETENTION_KEYS = frozenset(DEFAULTS["RETENTION"])
HEALTH_KEYS = frozenset(DEFAULTS["HEALTH"])
QUEUE_LIMIT_KEYS = tuple(option.upper() for option in LIMIT_OPTIONS)
QUEUE_KEYS = frozenset(
    {"MAX_ATTEMPTS", "RETRY", "PRIORITY", "MAX_SIZE", "PACE_RETRIES", *QUEUE_LIMIT_KEYS}
)

#: Settings whose problems are reported as E004 (durations) and E005 (counts; PREFETCH too,
#: which may also be "auto").
DURATIONS = ("LEASE_SECONDS", "HEARTBEAT_SECONDS", "POLL_SECONDS", "SHUTDOWN_TIMEOUT")
COUNTS = ("MAX_ATTEMPTS", "CONCURRENCY", "PROCESSES", "ERROR_HISTORY")


def _sorted_names(keys: Iterable[object]) -> list[str]:
    """Return ``keys`` as short reprs, sorted: a dict's keys may be of types that don't
    compare (0 and ""), or an int too long to print."""
    return sorted(brief(key) for key in keys)


def _retry_errors(retry: object, where: str) -> list[CheckMessage]:
    if not isinstance(retry, dict):
        return [
            Error(
                f"{where} must be a dict, not {type(retry).__name__}.",
                hint=f"Use keys among {sorted(RETRY_KEYS)}.",
                id="django_outbox.E007",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = _sorted_names(set(retry) - RETRY_KEYS)
    if unknown:
        errors.append(
            Error(
                f"{where} has unknown keys {unknown}.",
                hint=f"Use keys among {sorted(RETRY_KEYS)}.",
                id="django_outbox.E007",
            )
        )
    for key in sorted(RETRY_KEYS & set(retry)):
        bounds = RETRY_RANGES[key]
        if problem := bounds.problem(retry[key]):
            errors.append(
                Error(
                    f"{where}['{key}'] {problem}",
                    hint=f"{bounds.why} The default is {DEFAULTS['RETRY'][key]}.",
                    id="django_outbox.E007",
                )
            )
    return errors


def _unknown_keys_errors(
    setting: str, value: dict[Any, Any], keys: frozenset[str], hint: str, check_id: str
) -> list[CheckMessage]:
    """The error for keys of ``OUTBOX[setting]`` outside ``keys``, if there are any."""
    unknown = _sorted_names(set(value) - keys)
    if not unknown:
        return []
    return [Error(f"OUTBOX['{setting}'] has unknown keys {unknown}.", hint=hint, id=check_id)]


def _retention_errors(retention: object) -> list[CheckMessage]:
    hint = (
        f"Use keys among {sorted(RETENTION_KEYS)}, each {RETENTION_RANGE} or None to keep "
        "those jobs forever."
    )
    if not isinstance(retention, dict):
        return [Error("OUTBOX['RETENTION'] must be a dict.", hint=hint, id="django_outbox.E010")]
    errors = _unknown_keys_errors(
        "RETENTION", retention, RETENTION_KEYS, hint, "django_outbox.E010"
    )
    for key in sorted(set(retention) & RETENTION_KEYS):
        value = retention[key]
        if value is not None and (problem := RETENTION_RANGE.problem(value)):
            errors.append(
                Error(
                    f"OUTBOX['RETENTION']['{key}'] {problem}",
                    hint=hint,
                    id="django_outbox.E010",
                )
            )
    return errors


def _queues_errors(queues: object) -> list[CheckMessage]:
    hint = f'Use {{"queue-name": {{...}}}} with keys among {sorted(QUEUE_KEYS)}.'
    if not isinstance(queues, dict):
        return [Error("OUTBOX['QUEUES'] must be a dict.", hint=hint, id="django_outbox.E008")]
    errors: list[CheckMessage] = []
    for name, options in queues.items():
        problem = queue_name_error(name)
        if problem:
            errors.append(Error(problem, hint=hint, id="django_outbox.E008"))
            continue
        if not isinstance(options, dict):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}] must be a dict.",
                    hint=hint,
                    id="django_outbox.E008",
                )
            )
            continue
        unknown = _sorted_names(set(options) - QUEUE_KEYS)
        if unknown:
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}] has unknown options {unknown}.",
                    hint=hint,
                    id="django_outbox.E008",
                )
            )
        if "MAX_ATTEMPTS" in options and (problem := max_attempts_error(options["MAX_ATTEMPTS"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['MAX_ATTEMPTS']: {problem}",
                    hint="The first run counts as an attempt: 1 means never retry.",
                    id="django_outbox.E008",
                )
            )
        if "PRIORITY" in options and (problem := priority_error(options["PRIORITY"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['PRIORITY']: {problem}",
                    hint="Higher priorities run first; the default is 0.",
                    id="django_outbox.E008",
                )
            )
        if "RETRY" in options:
            errors += _retry_errors(options["RETRY"], f"OUTBOX['QUEUES'][{brief(name)}]['RETRY']")
        if "PACE_RETRIES" in options and not isinstance(options["PACE_RETRIES"], bool):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['PACE_RETRIES'] must be True or False, "
                    f"not {brief(options['PACE_RETRIES'])}.",
                    hint="True (the default) holds due retries back when a retry fails again.",
                    id="django_outbox.E008",
                )
            )
        if "MAX_SIZE" in options and (problem := max_size_error(options["MAX_SIZE"])):
            errors.append(
                Error(
                    f"OUTBOX['QUEUES'][{brief(name)}]['MAX_SIZE']: {problem}",
                    hint="The most jobs that may wait in the queue; leave it out for no bound.",
                    id="django_outbox.E008",
                )
            )
        for key in QUEUE_LIMIT_KEYS:
            if key in options and (problem := limit_error(key, options[key])):
                errors.append(
                    Error(
                        f"OUTBOX['QUEUES'][{brief(name)}]: {problem}",
                        hint="Caps are whole numbers of jobs running at once; rates are starts "
                        "per period such as '10/s' or '1/500ms'. See docs/limits.md.",
                        id="django_outbox.E070",
                    )
                )
    return errors


def _health_errors(health: object) -> list[CheckMessage]:
    hint = f"Use keys among {sorted(HEALTH_KEYS)}, each a number of seconds."
    if not isinstance(health, dict):
        return [Error("OUTBOX['HEALTH'] must be a dict.", hint=hint, id="django_outbox.E020")]
    errors = _unknown_keys_errors("HEALTH", health, HEALTH_KEYS, hint, "django_outbox.E020")
    for key in sorted(set(health) & HEALTH_KEYS):
        bounds = HEALTH_RANGES[key]
        if problem := bounds.problem(health[key]):
            errors.append(
                Error(
                    f"OUTBOX['HEALTH']['{key}'] {problem}",
                    hint=f"{bounds.why} The default is {DEFAULTS['HEALTH'][key]}.",
                    id="django_outbox.E021",
                )
            )
    return errors


def _context_errors(context: object) -> list[CheckMessage]:
    hint = (
        'A list of dotted paths to contextvars.ContextVar objects, e.g. ["myapp.log.request_id"].'
    )
    if not isinstance(context, list | tuple):
        return [Error("OUTBOX['CONTEXT'] must be a list.", hint=hint, id="django_outbox.E011")]
    return [
        Error(f"OUTBOX['CONTEXT']: {problem}", hint=hint, id="django_outbox.E011")
        for path in context
        if (problem := context_variable_error(path))
    ]


def setting_errors(user: object) -> list[CheckMessage]:
    """Return every problem with ``user``, the value of ``settings.OUTBOX``."""
    if not isinstance(user, dict):
        return [
            Error(
                "settings.OUTBOX must be a dict.",
                hint="Set OUTBOX = {} or leave it out to use the defaults.",
                id="django_outbox.E001",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = _sorted_names(set(user) - set(DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"settings.OUTBOX has unknown keys {unknown}.",
                hint=f"Known keys are {sorted(DEFAULTS)}; check the spelling.",
                id="django_outbox.E002",
            )
        )
    merged = {**DEFAULTS, **user}
    database = merged["DATABASE"]
    if not isinstance(database, str) or database not in settings.DATABASES:
        errors.append(
            Error(
                f"OUTBOX['DATABASE'] is {brief(merged['DATABASE'])}, which is not in DATABASES.",
                hint=f"Use one of {sorted(settings.DATABASES)}.",
                id="django_outbox.E003",
            )
        )
    for key in DURATIONS + COUNTS:
        bounds = RANGES[key]
        if problem := bounds.problem(merged[key]):
            errors.append(
                Error(
                    f"OUTBOX['{key}'] {problem}",
                    hint=f"{bounds.why} The default is {DEFAULTS[key]}.",
                    id="django_outbox.E004" if key in DURATIONS else "django_outbox.E005",
                )
            )
    if problem := prefetch_error(merged["PREFETCH"]):
        errors.append(
            Error(
                f"OUTBOX['PREFETCH'] {problem}",
                hint=f'{RANGES["PREFETCH"].why} The default, "{PREFETCH_AUTO}", claims ahead '
                "only while jobs are short.",
                id="django_outbox.E005",
            )
        )
    lease, heartbeat = merged["LEASE_SECONDS"], merged["HEARTBEAT_SECONDS"]
    if (
        not RANGES["LEASE_SECONDS"].problem(lease)
        and not RANGES["HEARTBEAT_SECONDS"].problem(heartbeat)
        and heartbeat * HEARTBEATS_PER_LEASE > lease
    ):
        errors.append(
            Error(
                f"OUTBOX['LEASE_SECONDS'] ({lease}) must be at least {HEARTBEATS_PER_LEASE} "
                f"times OUTBOX['HEARTBEAT_SECONDS'] ({heartbeat}).",
                hint="Otherwise one late heartbeat lets another worker take over a running job: "
                f"raise LEASE_SECONDS to {heartbeat * HEARTBEATS_PER_LEASE:g} or more, or lower "
                "HEARTBEAT_SECONDS.",
                id="django_outbox.E006",
            )
        )
    if "RETRY" in user:
        errors += _retry_errors(user["RETRY"], "OUTBOX['RETRY']")
    if "RETENTION" in user:
        errors += _retention_errors(user["RETENTION"])
    if "HEALTH" in user:
        errors += _health_errors(user["HEALTH"])
    if "CONTEXT" in user:
        errors += _context_errors(user["CONTEXT"])
    if "CODEC" in user and (problem := codec_setting_error(user["CODEC"])):
        errors.append(
            Error(
                f"OUTBOX['CODEC'] {problem}",
                hint="The dotted path of an object (or class) with encode() and decode().",
                id="django_outbox.E012",
            )
        )
    if "BROKERS" in user:
        errors += brokers_errors(user["BROKERS"])
    if "RELAY" in user:
        errors += relay_errors(user["RELAY"])
    if "CRON" in user or "CRON_TIMEZONE" in user:
        errors += cron_setting_errors(user)
    errors += _queues_errors(merged["QUEUES"])
    problem = queue_name_error(merged["DEFAULT_QUEUE"])
    if problem:
        errors.append(
            Error(
                f"OUTBOX['DEFAULT_QUEUE'] is invalid: {problem}",
                hint='The default is "default".',
                id="django_outbox.E009",
            )
        )
    return errors
