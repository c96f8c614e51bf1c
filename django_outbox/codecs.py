"""Codecs: how a task's payloads become JSON and back, for types the built-in rules don't know.

A codec has ``encode(value)``, which returns what JSON can hold (checked by the same rules as
any payload), and ``decode(data)``, which turns that back into the value the handler receives.
Per task (``@task(codec=...)``) or for every task (``OUTBOX["CODEC"]``, a dotted path). The
stored form is always JSON: never pickle.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol, runtime_checkable

from .validation.loaders import load_codec


@runtime_checkable
class Codec(Protocol):
    """Turns a task's payloads into JSON data and back."""

    def encode(self, value: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


@functools.cache
def codec_at(path: str) -> Codec:
    """Return the codec at dotted ``path`` (a class is instantiated without arguments)."""
    codec: Codec = load_codec(path)
    return codec
