"""The relay's settings (``OUTBOX["BROKERS"]``, ``OUTBOX["RELAY"]``) and what ``publish()``
accepts: topics, types, headers and broker names.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error
from django.utils.module_loading import import_string

from .bounds import DAY, HOUR, RETENTION_MAX, Range
from .text import KEY_MAX_LENGTH, brief, text_error

#: Every key of ``OUTBOX["RELAY"]`` with its default (docs/relay.md explains each).
RELAY_DEFAULTS: dict[str, Any] = {
    # Messages one relay claims and publishes at a time (confirms in flight together).
    "BATCH_SIZE": 500,
    # How long a claim holds its messages: another relay takes them over after this (a relay
    # that died mid-batch). Broker clients time out well within it.
    "LEASE_SECONDS": 30.0,
    # How often an idle relay looks for messages (PostgreSQL also wakes it by NOTIFY).
    "POLL_SECONDS": 1.0,
    # A message the broker refused for a reason that may pass is tried again after this.
    "RETRY_SECONDS": 5.0,
    # Refusals before a message is blocked (its key waits behind it until the admin acts).
    "MAX_REFUSALS": 5,
    # Seconds confirmed messages are kept (as sent); None deletes them at once.
    "RETENTION": None,
    # Seconds receive_once() remembers a handled message id.
    "INBOX_RETENTION": 7 * DAY,
}
RELAY_KEYS = frozenset(RELAY_DEFAULTS)
BROKER_KEYS = frozenset({"BACKEND", "OPTIONS"})

RELAY_RANGES: dict[str, Range] = {
    "BATCH_SIZE": Range(1, 100_000, "Messages claimed and held per batch.", kind="integer"),
    "LEASE_SECONDS": Range(
        1, DAY, "Messages of a relay that died are published again after this long."
    ),
    "POLL_SECONDS": Range(0.01, HOUR, "An idle relay looks for messages this often."),
    "RETRY_SECONDS": Range(0, DAY, "A refused message is tried again after this long."),
    "MAX_REFUSALS": Range(
        1, 1_000_000, "Refusals before a message is blocked for the admin.", kind="integer"
    ),
    "RETENTION": Range(
        0, RETENTION_MAX, "Confirmed messages older than this are deleted.", above_minimum=True
    ),
    "INBOX_RETENTION": Range(
        0, RETENTION_MAX, "Handled message ids older than this are forgotten.", above_minimum=True
    ),
}

#: The longest topic, type and broker name (the columns' lengths).
TOPIC_MAX_LENGTH = 255
TYPE_MAX_LENGTH = 255
BROKER_NAME_MAX_LENGTH = 100


def broker_class_error(path: object) -> str | None:
    """Return why ``path`` does not name a broker class, or None."""
    if not isinstance(path, str) or not path:
        return f"BACKEND must be the dotted path of a broker class, not {brief(path)}."
    try:
        found = import_string(path)
    except ImportError as error:
        return f"BACKEND {path} cannot be imported ({error})."
    if not isinstance(found, type) or not callable(getattr(found, "publish", None)):
        return f"BACKEND {path} is not a broker class (a class with publish(messages))."
    return None


def brokers_errors(brokers: object) -> list[CheckMessage]:
    """Return every problem with ``OUTBOX["BROKERS"]``."""
    hint = (
        'Use {"name": {"BACKEND": "django_outbox.relay.brokers.redis.RedisStreams", '
        '"OPTIONS": {...}}}; docs/relay.md lists the brokers.'
    )
    if not isinstance(brokers, dict):
        return [Error("OUTBOX['BROKERS'] must be a dict.", hint=hint, id="django_outbox.E040")]
    errors: list[CheckMessage] = []
    for name, entry in brokers.items():
        where = f"OUTBOX['BROKERS'][{brief(name)}]"
        if problem := broker_name_error(name):
            errors.append(Error(problem, hint=hint, id="django_outbox.E040"))
            continue
        if not isinstance(entry, dict):
            errors.append(Error(f"{where} must be a dict.", hint=hint, id="django_outbox.E040"))
            continue
        unknown = sorted(brief(key) for key in set(entry) - BROKER_KEYS)
        if unknown:
            errors.append(
                Error(f"{where} has unknown keys {unknown}.", hint=hint, id="django_outbox.E040")
            )
        if problem := broker_class_error(entry.get("BACKEND")):
            errors.append(Error(f"{where}: {problem}", hint=hint, id="django_outbox.E041"))
        if not isinstance(entry.get("OPTIONS", {}), dict):
            errors.append(
                Error(f"{where}['OPTIONS'] must be a dict.", hint=hint, id="django_outbox.E040")
            )
    return errors


def relay_errors(relay: object) -> list[CheckMessage]:
    """Return every problem with ``OUTBOX["RELAY"]``."""
    hint = f"Use keys among {sorted(RELAY_KEYS)}; docs/relay.md explains each."
    if not isinstance(relay, dict):
        return [Error("OUTBOX['RELAY'] must be a dict.", hint=hint, id="django_outbox.E042")]
    errors: list[CheckMessage] = []
    unknown = sorted(brief(key) for key in set(relay) - RELAY_KEYS)
    if unknown:
        errors.append(
            Error(
                f"OUTBOX['RELAY'] has unknown keys {unknown}.", hint=hint, id="django_outbox.E042"
            )
        )
    for key in sorted(set(relay) & RELAY_KEYS):
        value = relay[key]
        if value is None and key == "RETENTION":
            continue
        if problem := RELAY_RANGES[key].problem(value):
            errors.append(
                Error(
                    f"OUTBOX['RELAY']['{key}'] {problem}",
                    hint=f"{RELAY_RANGES[key].why} The default is {RELAY_DEFAULTS[key]}.",
                    id="django_outbox.E043",
                )
            )
    return errors


def broker_name_error(name: object) -> str | None:
    """Return why ``name`` cannot name a broker, or None."""
    if not isinstance(name, str) or not name:
        return f"A broker name must be a non-empty string, not {brief(name)}."
    if len(name) > BROKER_NAME_MAX_LENGTH:
        return f"A broker name must be at most {BROKER_NAME_MAX_LENGTH} characters."
    if problem := text_error(name):
        return f"The broker name {brief(name)} {problem}."
    return None


def label_error(field: str, value: object, max_length: int, *, required: bool) -> str | None:
    """Return why ``value`` cannot be a message's ``field`` (topic, key, type), or None: a
    non-empty string (or None where not ``required``) the databases can store."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        kind = "a non-empty string" if required else "a non-empty string or None"
        return f"{field} must be {kind}, not {brief(value)}."
    if len(value) > max_length:
        return f"{field} must be at most {max_length} characters, not {len(value)}."
    if problem := text_error(value):
        return f"{field} {brief(value)} {problem}."
    return None


def headers_error(headers: object) -> str | None:
    """Return why ``headers`` cannot be a message's headers (a dict of str to str), or None."""
    if headers is None:
        return None
    if not isinstance(headers, dict):
        return f"headers must be a dict of strings, not {type(headers).__name__}."
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            return (
                f"headers must map non-empty strings to strings; {brief(name)}: {brief(value)} "
                "is not."
            )
        if problem := text_error(name) or text_error(value):
            return f"header {brief(name)} {problem}."
        if len(name) > KEY_MAX_LENGTH:
            return f"header names must be at most {KEY_MAX_LENGTH} characters."
    return None
