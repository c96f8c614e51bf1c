"""Strings the databases can store, and what a name or a key may be."""

from __future__ import annotations

from typing import Any

#: The longest queue name (the column's length).
QUEUE_NAME_MAX_LENGTH = 100
#: The longest task name (the column's length).
TASK_NAME_MAX_LENGTH = 255
#: The longest unique_key, lock or fair_key (the columns' length).
KEY_MAX_LENGTH = 255
#: The longest worker id (the length of the jobs' and the workers' worker_id columns).
WORKER_ID_MAX_LENGTH = 255


def brief(value: Any) -> str:
    """Return a repr of ``value`` short enough for an error message."""
    try:
        text = repr(value)
    except Exception:  # A user's __repr__ may raise anything; an int too long to print, too.
        return f"a {type(value).__qualname__}"
    return text if len(text) <= 80 else f"{text[:60]}...{text[-15:]}"


def text_error(text: str) -> str | None:
    """Return why ``text`` cannot be stored in every supported database, or None if it can."""
    if text.isascii() and "\x00" not in text:
        return None
    index = text.find("\x00")
    if index >= 0:
        return (
            f"contains a NUL character ('\\x00' at index {index}); PostgreSQL cannot store it. "
            "Remove it, or encode binary data (e.g. base64) before enqueueing"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return (
                f"contains a lone surrogate ({text[error.start]!r} at index {error.start}); "
                "it is not Unicode text and cannot be stored as UTF-8 (it usually comes from "
                "bytes decoded with errors='surrogateescape')"
            )
    return None


def name_error(kind: str, name: str) -> str | None:
    """Return why a task or queue name (``kind``) cannot be stored, or None if it can."""
    problem = text_error(name)
    return f"The {kind} name {brief(name)} {problem}." if problem else None


def queue_name_error(name: object) -> str | None:
    """Return why ``name`` is not a usable queue name, or ``None`` when it is."""
    if not isinstance(name, str) or not name.strip():
        return f"A queue name must be a non-empty string, not {brief(name)}."
    if len(name) > QUEUE_NAME_MAX_LENGTH:
        return f"Queue name {name[:20]!r}... is longer than {QUEUE_NAME_MAX_LENGTH} characters."
    if problem := text_error(name):
        # Every enqueue to such a queue would be refused.
        return f"The queue name {brief(name)} {problem}."
    return None


def key_error(name: str, key: Any) -> str | None:
    """Return why ``key`` cannot be a job's ``name`` (unique_key, lock, fair_key), or None."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        return f"{name} must be a non-empty string, not {brief(key)}."
    if len(key) > KEY_MAX_LENGTH:
        return f"{name} must be at most {KEY_MAX_LENGTH} characters, not {len(key)}."
    if problem := text_error(key):
        return f"{name} {brief(key)} {problem}."
    return None


def worker_id_error(worker_id: object) -> str | None:
    """Return why ``worker_id`` cannot name a worker, or ``None`` when it can."""
    if not isinstance(worker_id, str) or not worker_id.strip():
        return f"A worker id must be a non-empty string, not {brief(worker_id)}."
    if len(worker_id) > WORKER_ID_MAX_LENGTH:
        return (
            f"A worker id must be at most {WORKER_ID_MAX_LENGTH} characters (the worker_id "
            f"column's length), not {len(worker_id)}."
        )
    if problem := text_error(worker_id):
        return f"The worker id {brief(worker_id)} {problem}."
    control = next((index for index, char in enumerate(worker_id) if not char.isprintable()), None)
    if control is not None:
        # Every log line of the worker names it: a newline would forge lines.
        return (
            f"The worker id {brief(worker_id)} contains a control character "
            f"({worker_id[control]!r} at index {control}); it is printed in the worker's log "
            "lines. Use letters, digits and punctuation."
        )
    return None
