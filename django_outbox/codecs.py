"""Codecs: how a task's payloads become JSON and back, for types the built-in rules don't know.

A codec has ``encode(value)``, which returns what JSON can hold (checked by the same rules as
any payload), and ``decode(data)``, which turns that back into the value the handler receives.
Per task (``@task(codec=...)``) or for every task (``OUTBOX["CODEC"]``, a dotted path). The
stored form is always JSON: never pickle.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol, runtime_checkable

from django.utils.module_loading import import_string


@runtime_checkable
class Codec(Protocol):
    """Turns a task's payloads into JSON data and back."""

    def encode(self, value: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


def codec_error(codec: object) -> str | None:
    """Return why ``codec`` cannot serve as a codec, or None."""
    if not (callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))):
        return f"a codec needs encode(value) and decode(data) methods; {codec!r} lacks them."
    return None


@functools.cache
def codec_at(path: str) -> Codec:
    """Return the codec at dotted ``path`` (a class is instantiated without arguments)."""
    found = import_string(path)
    codec = found() if isinstance(found, type) else found
    if problem := codec_error(codec):
        raise TypeError(problem)
    return codec  # type: ignore[no-any-return]


def setting_error(path: object) -> str | None:
    """Return why ``OUTBOX["CODEC"]`` cannot be used, or None (for the system checks)."""
    if path is None:
        return None
    if not isinstance(path, str):
        return f"must be a dotted path (a string) or None, not {type(path).__name__}."
    try:
        codec_at(path)
    except ImportError as error:
        return f"{path} cannot be imported ({error})."
    except TypeError as error:
        return f"{path}: {error}"
    return None
