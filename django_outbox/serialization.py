"""JSON payloads that round-trip the types Django code passes around.

Payloads are stored as JSON, never pickle. Values JSON lacks are written as one-key objects
(``{"$datetime": "2026-11-21T12:00:00+00:00"}``) and read back as the original type. A dict of
the user's that happens to look like such a tag is wrapped in ``{"$dict": {...}}`` so that it,
too, reads back unchanged.

Every payload is checked before it is written, so that no database refuses it halfway through
the caller's transaction and every worker can read it back: strings hold no NUL and no lone
surrogate, integers have at most ``MAX_INT_DIGITS`` digits, lists and dicts nest at most
``MAX_DEPTH`` deep, and the JSON text is at most ``MAX_PAYLOAD_SIZE`` long.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import uuid
from collections.abc import Callable
from typing import Any

from .exceptions import PayloadDecodeError, PayloadError
from .validation.text import brief, text_error

JSONValue = Any

#: How deep lists and dicts may nest, the payload itself counting as one level. Far more than
#: task data needs, and far below the recursion limit of the code that encodes and decodes it.
MAX_DEPTH = 100
#: The longest payload, in characters of its JSON text as stored (``json.dumps``, which writes
#: non-ASCII characters as escapes). Every claim reads its jobs' payloads: pass the id of large
#: data, not the data.
MAX_PAYLOAD_SIZE = 1024 * 1024
#: The most digits an integer may have: the lowest limit of int-to-text conversion a Python
#: process can set (``sys.set_int_max_str_digits``; 4,300 by default), so every worker can
#: read the number back.
MAX_INT_DIGITS = 640
_INT_BOUND = 10**MAX_INT_DIGITS
#: Floats from here on travel as text: PostgreSQL's jsonb keeps numbers as exact decimals and
#: gives 1e16 back as the integer 10000000000000000, and 1.5e300 as an integer that no longer
#: equals the float. Below it, Python writes every float with a fraction or as a small exponent.
_FLOAT_AS_TEXT = 1e16
#: The room in the JSON text a plain value of a flat dict takes beyond its characters: quotes,
#: colon and separator, or a whole number (an integer of MAX_INT_DIGITS digits, a float).
_ITEM_ALLOWANCE = MAX_INT_DIGITS + 10

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
    "$float": float,
}
#: What each tag's text must be, for error messages.
_TAG_TEXTS = {
    "$datetime": "an ISO 8601 datetime",
    "$date": "an ISO 8601 date",
    "$time": "an ISO 8601 time",
    "$decimal": "a decimal number",
    "$uuid": "a UUID",
    "$float": "a float",
}
_ESCAPE = "$dict"


class _Refused(Exception):
    """A value inside a payload is refused; ``where`` collects its path, innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where: list[str] = []

    def path(self, root: str) -> str:
        where = self.where[::-1]
        if len(where) > 12:
            # Only a payload nested too deep has such a path: show both of its ends.
            where = [*where[:8], f"...({len(where) - 12} more)...", *where[-4:]]
        return root + "".join(where)


def _looks_like_tag(value: dict[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)) in (*_DECODERS, _ESCAPE)


def _is_unicode(text: str) -> bool:
    """Whether ``text`` is free of lone surrogates, which UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode(value: Any, path: str = "payload") -> JSONValue:
    """Return ``value`` as plain JSON data, or raise PayloadError naming the offending path."""
    if type(value) is dict:
        # The common payload, {"user_id": 42, "email": "..."}: plain values under plain keys
        # need no conversion, and a glance at each checks them. Anything else takes the walk.
        characters = wide_characters = 0
        for key, item in value.items():
            if type(key) is not str or "\x00" in key:
                break
            if key.isascii():
                characters += len(key)
            elif _is_unicode(key):
                wide_characters += len(key)
            else:
                break
            kind = type(item)
            if kind is str:
                if "\x00" in item:
                    break
                if item.isascii():
                    characters += len(item)
                elif _is_unicode(item):
                    wide_characters += len(item)
                else:
                    break
            elif kind is int:
                if not -_INT_BOUND < item < _INT_BOUND:
                    break
            elif kind is float:
                if not -_FLOAT_AS_TEXT < item < _FLOAT_AS_TEXT:  # False for NaN, too.
                    break
            elif item is not None and kind is not bool:
                break
        else:
            # A character takes six characters of JSON at most ("\u001f", "\u00e9"), twelve
            # if it is beyond the Basic Multilingual Plane ("\ud83d\ude00").
            longest = 6 * characters + 12 * wide_characters + _ITEM_ALLOWANCE * len(value)
            if longest <= MAX_PAYLOAD_SIZE and not _looks_like_tag(value):
                return dict(value)
    try:
        encoded = _encode(value, 0, set())
    except _Refused as refused:
        raise PayloadError(f"{refused.path(path)} {refused.reason}.") from refused.__cause__
    size = len(json.dumps(encoded, check_circular=False))
    if size > MAX_PAYLOAD_SIZE:
        raise PayloadError(
            f"{path} is {size:,} bytes of JSON; the limit is {MAX_PAYLOAD_SIZE:,} bytes "
            "(django_outbox.serialization.MAX_PAYLOAD_SIZE). Store large data elsewhere (a "
            "model, a file) and pass its id."
        )
    return encoded


def _encode(value: Any, depth: int, ancestors: set[int]) -> JSONValue:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        problem = text_error(value)
        if problem:
            raise _Refused(problem)
        return value
    if isinstance(value, int):
        if not -_INT_BOUND < value < _INT_BOUND:
            raise _Refused(
                f"is an integer of more than {MAX_INT_DIGITS} digits, more than every Python "
                "process can read back; pass it as a str or a Decimal"
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(f"is {value!r}; JSON has no NaN or infinity")
        return {"$float": repr(value)} if abs(value) >= _FLOAT_AS_TEXT else value
    if isinstance(value, dict | list | tuple):
        if id(value) in ancestors:
            raise _Refused(
                f"is the {type(value).__name__} that contains it: a circular reference, which "
                "JSON cannot hold"
            )
        if depth == MAX_DEPTH:
            raise _Refused(
                f"is nested more than {MAX_DEPTH} levels deep (lists and dicts inside one "
                "another); flatten the data, or store it elsewhere and pass its id"
            )
        ancestors.add(id(value))
        try:
            if isinstance(value, dict):
                return _encode_dict(value, depth + 1, ancestors)
            return _encode_list(value, depth + 1, ancestors)
        finally:
            ancestors.discard(id(value))
    if isinstance(value, decimal.Decimal) and not value.is_finite():
        # Stored as text it would round-trip, but no handler expects it, and the README
        # promises NaN and infinity are refused, as for floats.
        raise _Refused(f"is {value!r}; NaN and infinity are refused, as for floats")
    for kind, tag, to_text in _ENCODERS:
        if isinstance(value, kind):
            return {tag: to_text(value)}
    raise _Refused(
        f"is a {type(value).__module__}.{type(value).__qualname__}, which cannot be stored "
        "as JSON. Pass plain data (dict, list, str, int, float, bool, None, datetime, date, "
        "time, Decimal, UUID), e.g. a model's primary key instead of the instance"
    )


def _encode_dict(value: dict[Any, Any], depth: int, ancestors: set[int]) -> JSONValue:
    encoded: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _Refused(
                f"has the key {brief(key)} of type {type(key).__name__}; JSON object keys "
                "must be strings (convert it, e.g. str(key), before enqueueing)"
            )
        problem = text_error(key)
        if problem:
            raise _Refused(f"has the key {brief(key)}, which {problem}")
        try:
            encoded[key] = _encode(item, depth, ancestors)
        except _Refused as refused:
            refused.where.append(f"[{brief(key)}]")
            raise
    return {_ESCAPE: encoded} if _looks_like_tag(encoded) else encoded


def _encode_list(value: list[Any] | tuple[Any, ...], depth: int, ancestors: set[int]) -> JSONValue:
    encoded = []
    for index, item in enumerate(value):
        try:
            encoded.append(_encode(item, depth, ancestors))
        except _Refused as refused:
            refused.where.append(f"[{index}]")
            raise
    return encoded


def decode(value: JSONValue, path: str = "payload") -> Any:
    """Return the payload that ``encode`` turned into ``value``.

    Raise PayloadDecodeError, naming the path, for data ``encode`` does not write: a tag whose
    value its type cannot be read from, or lists and dicts nested deeper than ``MAX_DEPTH``.
    """
    if type(value) is dict and not _looks_like_tag(value):
        # The common payload again: with no list or dict inside, there is nothing to convert.
        for item in value.values():
            if type(item) is dict or type(item) is list:
                break
        else:
            return dict(value)
    try:
        return _decode(value, 0)
    except _Refused as refused:
        raise PayloadDecodeError(
            f"The payload cannot be decoded: {refused.path(path)} {refused.reason}."
        ) from refused.__cause__


def decode_stored(stored: Any) -> Any:
    """Return the payload of a job row's ``payload`` column, as the database driver returned it.

    ``stored`` is the column's JSON text (a str or bytes), None for SQL NULL, or JSON that a
    driver parsed itself (a dict, a list, a number). Raise PayloadDecodeError if it is not JSON,
    or not JSON that ``encode`` writes.
    """
    if isinstance(stored, str | bytes | bytearray):
        try:
            stored = json.loads(stored)
        except RecursionError as error:
            raise PayloadDecodeError(
                "The payload cannot be decoded: payload is nested too deep to parse (more "
                f"than {MAX_DEPTH} levels of lists and dicts are refused anyway)."
            ) from error
        except ValueError as error:  # Not JSON, not UTF-8, or an integer too long to read.
            raise PayloadDecodeError(
                f"The payload cannot be decoded: payload is not valid JSON ({error})."
            ) from error
    return decode(stored)


def _decode(value: JSONValue, depth: int) -> Any:
    if isinstance(value, list):
        if depth == MAX_DEPTH:
            raise _Refused(_too_deep())
        decoded = []
        for index, item in enumerate(value):
            try:
                decoded.append(_decode(item, depth + 1))
            except _Refused as refused:
                refused.where.append(f"[{index}]")
                raise
        return decoded
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag == _ESCAPE:
                if not isinstance(inner, dict):
                    raise _Refused(
                        f"has the tag {_ESCAPE} with {brief(inner)}, which is not an object"
                    )
                value = inner
            elif tag in _DECODERS:
                return _decode_tag(tag, inner)
        if depth == MAX_DEPTH:
            raise _Refused(_too_deep())
        decoded_dict = {}
        for key, item in value.items():
            try:
                decoded_dict[key] = _decode(item, depth + 1)
            except _Refused as refused:
                refused.where.append(f"[{brief(key)}]")
                raise
        return decoded_dict
    return value


def _decode_tag(tag: str, text: Any) -> Any:
    if not isinstance(text, str):
        raise _Refused(f"has the tag {tag} with {brief(text)}, which is not a string")
    try:
        return _DECODERS[tag](text)
    except (ValueError, ArithmeticError) as error:  # decimal.InvalidOperation is arithmetic.
        raise _Refused(
            f"has the tag {tag} with {brief(text)}, which is not {_TAG_TEXTS[tag]}"
        ) from error


def _too_deep() -> str:
    return f"is nested more than {MAX_DEPTH} levels deep (lists and dicts inside one another)"
