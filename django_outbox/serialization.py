"""JSON payloads that round-trip the types Django code passes around.

Payloads are stored as JSON, never pickle. Values JSON lacks are written as one-key objects
(``{"$datetime": "2026-11-21T12:00:00+00:00"}``) and read back as the original type. A dict of
the user's that happens to look like such a tag is wrapped in ``{"$dict": {...}}`` so that it,
too, reads back unchanged.
"""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from collections.abc import Callable
from typing import Any

from .exceptions import PayloadError

JSONValue = Any

_ENCODERS: list[tuple[type, str, Callable[[Any], str]]] = [
    # datetime before date: a datetime is a date too.
    (datetime.datetime, "$datetime", lambda value: value.isoformat()),
    (datetime.date, "$date", lambda value: value.isoformat()),
    (datetime.time, "$time", lambda value: value.isoformat()),
    (decimal.Decimal, "$decimal", str),
    (uuid.UUID, "$uuid", str),
]
_DECODERS: dict[str, Callable[[str], Any]] = {
    "$datetime": datetime.datetime.fromisoformat,
    "$date": datetime.date.fromisoformat,
    "$time": datetime.time.fromisoformat,
    "$decimal": decimal.Decimal,
    "$uuid": uuid.UUID,
}
_ESCAPE = "$dict"


def _looks_like_tag(value: dict[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)) in (*_DECODERS, _ESCAPE)


#: Types stored as they are, whatever their value (floats are checked for NaN and infinity).
_PLAIN_TYPES = frozenset({str, int, bool, type(None)})


def encode(value: Any, path: str = "payload") -> JSONValue:
    """Return ``value`` as plain JSON data, or raise PayloadError naming the offending path."""
    if (
        type(value) is dict
        and all(type(key) is str and type(item) in _PLAIN_TYPES for key, item in value.items())
        and not _looks_like_tag(value)
    ):
        # The common payload, {"user_id": 42, "email": "..."}: nothing to convert or check.
        return dict(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{path} is {value!r}; JSON has no NaN or infinity.")
        return value
    if isinstance(value, dict):
        encoded: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(
                    f"{path} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                    "must be strings (convert it, e.g. str(key), before enqueueing)."
                )
            encoded[key] = encode(item, f"{path}[{key!r}]")
        return {_ESCAPE: encoded} if _looks_like_tag(encoded) else encoded
    if isinstance(value, list | tuple):
        return [encode(item, f"{path}[{index}]") for index, item in enumerate(value)]
    for kind, tag, to_text in _ENCODERS:
        if isinstance(value, kind):
            return {tag: to_text(value)}
    raise PayloadError(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which cannot be stored "
        "as JSON. Pass plain data (dict, list, str, int, float, bool, None, datetime, date, "
        "time, Decimal, UUID), e.g. a model's primary key instead of the instance."
    )


def decode(value: JSONValue) -> Any:
    """Return the payload that ``encode`` turned into ``value``."""
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag == _ESCAPE:
                return {key: decode(item) for key, item in inner.items()}
            if tag in _DECODERS:
                return _DECODERS[tag](inner)
        return {key: decode(item) for key, item in value.items()}
    return value
