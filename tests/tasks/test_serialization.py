"""Payloads are JSON, and the types Django code passes around come back unchanged."""

import datetime
import decimal
import json
import uuid

import pytest

import django_outbox
from django_outbox import OutboxError, PayloadDecodeError, PayloadError
from django_outbox.serialization import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_PAYLOAD_SIZE,
    decode,
    decode_stored,
    encode,
)


def nested(depth, leaf=None):
    """Return ``leaf`` inside ``depth`` lists, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


ROUND_TRIPS = [
    None,
    True,
    3,
    2.5,
    "text",
    [1, "two", None],
    {"nested": {"list": [1, {"deep": True}]}},
    datetime.datetime(2026, 11, 21, 12, 30, 15, 123456, tzinfo=datetime.timezone.utc),
    datetime.datetime(2026, 11, 21, 12, 30),
    datetime.date(2026, 11, 21),
    datetime.time(12, 30, 1),
    decimal.Decimal("12.3400"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    {"when": datetime.date(2026, 1, 1), "amounts": [decimal.Decimal("0.10")]},
    # A user's dict that looks like one of the type tags reads back as that dict.
    {"$date": "2026-11-21"},
    {"$dict": {"a": 1}},
    {"$float": "1e+16"},
    # Integers beyond 64 bits, up to the digit limit.
    2**100,
    -(2**100),
    10**MAX_INT_DIGITS - 1,
    {"id": -(10**MAX_INT_DIGITS) + 1},
    # Floats that PostgreSQL's jsonb would print as integers travel as text.
    1e16,
    -1.5e300,
    {"tiny": 5e-324, "huge": 1.7976931348623157e308},
    # Any Unicode but NUL and lone surrogates, keys included.
    {"naïve ключ 😀": 'é 😀 \u200b \x01 "quoted" \\'},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=repr)
def test_round_trip(value):
    assert decode(encode(value)) == value
    assert type(decode(encode(value))) is type(value)
    assert decode(json.loads(json.dumps(encode(value), allow_nan=False))) == value


def test_tuples_come_back_as_lists():
    assert decode(encode((1, 2))) == [1, 2]


def test_large_floats_keep_their_type_and_value():
    assert encode({"x": 1e16}) == {"x": {"$float": "1e+16"}}
    assert encode(123456789012345.6) == 123456789012345.6
    assert type(decode(encode(1e16))) is float


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (object(), "payload is a builtins.object"),
        ({"user": {1, 2}}, r"payload\['user'\] is a builtins.set"),
        ({1: "a"}, "key 1 of type int"),
        ([float("nan")], r"payload\[0\] is nan"),
        ({"at": float("-inf")}, r"payload\['at'\] is -inf"),
        # Decimals as floats: the README says NaN and infinity are refused.
        ({"amount": decimal.Decimal("NaN")}, r"payload\['amount'\] is Decimal\('NaN'\)"),
        ([decimal.Decimal("-Infinity")], r"payload\[0\] is Decimal\('-Infinity'\)"),
        ([decimal.Decimal("sNaN")], r"payload\[0\] is Decimal\('sNaN'\)"),
        (b"bytes", "builtins.bytes"),
        # PostgreSQL's text and jsonb cannot hold NUL; UTF-8 cannot hold a lone surrogate.
        ("a\x00b", "payload contains a NUL character"),
        ({"name": "a\x00b"}, r"payload\['name'\] contains a NUL character"),
        ({"ok": 1, "a\x00": 1}, r"payload has the key 'a\\x00', which contains a NUL character"),
        (
            {"items": [{}, {}, {}, {"name": "caf\udcff"}]},
            r"payload\['items'\]\[3\]\['name'\] contains a lone surrogate \('\\udcff' at index 3\)",
        ),
        ({"k": {"\ud800": 1}}, r"payload\['k'\] has the key '\\ud800', which contains a lone"),
        (["é", ("x\x00",)], r"payload\[1\]\[0\] contains a NUL character"),
        # More digits than any Python process can be relied on to read back.
        ({"n": 10**MAX_INT_DIGITS}, rf"payload\['n'\] is an integer of more than {MAX_INT_DIGITS}"),
        ([-(10**4300)], rf"payload\[0\] is an integer of more than {MAX_INT_DIGITS} digits"),
    ],
)
def test_values_json_cannot_hold_are_refused_with_their_path(value, message):
    with pytest.raises(PayloadError, match=message):
        encode(value)


def test_nesting_up_to_the_limit_round_trips():
    # Lists and dicts count alike; the leaf dict is escaped as {"$dict": {...}} when stored,
    # which does not count as a level of the caller's data.
    deepest = nested(MAX_DEPTH - 1, leaf={"$dict": "user data"})
    assert decode(encode(deepest)) == deepest
    assert decode(json.loads(json.dumps(encode(deepest)))) == deepest


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000])
def test_deeper_nesting_is_refused_not_a_recursion_error(depth):
    with pytest.raises(PayloadError, match=f"is nested more than {MAX_DEPTH} levels deep"):
        encode(nested(depth))
    with pytest.raises(PayloadError, match=f"is nested more than {MAX_DEPTH} levels deep"):
        encode({"a": nested(depth - 1)})


def test_circular_references_are_refused_with_their_path():
    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(PayloadError, match=r"payload\[1\] is the list that contains it"):
        encode(loop)
    children: list[object] = []
    node = {"name": "a", "children": children}
    children.append({"parent": node})
    with pytest.raises(
        PayloadError, match=r"payload\['children'\]\[0\]\['parent'\] is the dict that contains it"
    ):
        encode(node)


def test_a_value_shared_by_two_branches_is_not_circular():
    shared = {"n": [1, 2]}
    assert decode(encode([shared, shared, {"again": shared}])) == [
        shared,
        shared,
        {"again": shared},
    ]


def test_the_size_limit_counts_the_json_text():
    limit = MAX_PAYLOAD_SIZE
    # A flat dict (the fast path) and a list (the full walk) exactly at the limit pass.
    at_limit = {"k": "x" * (limit - len('{"k": ""}'))}
    assert len(json.dumps(encode(at_limit))) == limit
    assert encode(["x" * (limit - len('[""]'))]) is not None
    over = {"k": "x" * (limit - len('{"k": ""}') + 1)}
    with pytest.raises(
        PayloadError,
        match=rf"payload is {limit + 1:,} bytes of JSON; the limit is {limit:,} bytes",
    ):
        encode(over)
    with pytest.raises(PayloadError, match="bytes of JSON; the limit is"):
        encode(["x" * (limit - len('[""]') + 1)])


@pytest.mark.parametrize(
    "text",
    [
        # Escaped characters take up to six bytes of JSON each, and astral ones twelve.
        "\x01" * (MAX_PAYLOAD_SIZE // 6 + 1),
        "é" * (MAX_PAYLOAD_SIZE // 6 + 1),
        "😀" * (MAX_PAYLOAD_SIZE // 12 + 1),
    ],
    ids=["control", "latin", "astral"],
)
def test_the_size_limit_counts_escapes(text):
    with pytest.raises(PayloadError, match="bytes of JSON; the limit is"):
        encode({"text": text})


def test_the_size_limit_counts_many_big_integers():
    big = 10**MAX_INT_DIGITS - 1
    count = MAX_PAYLOAD_SIZE // MAX_INT_DIGITS + 1
    with pytest.raises(PayloadError, match="bytes of JSON; the limit is"):
        encode({f"n{index}": big for index in range(count)})


# decode: a row holds whatever was written to it, by this version, an older one, or by hand.


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        ({"$datetime": "not a date"}, r"payload has the tag \$datetime with 'not a date'"),
        ({"$decimal": "abc"}, r"payload has the tag \$decimal with 'abc'"),
        ({"$uuid": 5}, r"payload has the tag \$uuid with 5, which is not a string"),
        ({"$dict": 5}, r"payload has the tag \$dict with 5, which is not an object"),
        ({"$date": None}, r"payload has the tag \$date with None, which is not a string"),
        ({"$time": "25:00"}, r"payload has the tag \$time with '25:00'"),
        ({"$float": "many"}, r"payload has the tag \$float with 'many'"),
        ({"items": [1, {"$datetime": "x"}]}, r"payload\['items'\]\[1\] has the tag \$datetime"),
        ({"$dict": {"a": {"$uuid": "zz"}}}, r"payload\['a'\] has the tag \$uuid with 'zz'"),
        (nested(MAX_DEPTH + 1), f"is nested more than {MAX_DEPTH} levels deep"),
    ],
)
def test_a_stored_payload_that_cannot_be_decoded_raises_payload_decode_error(stored, message):
    with pytest.raises(PayloadDecodeError, match=message) as caught:
        decode(stored)
    assert str(caught.value).startswith("The payload cannot be decoded: ")
    # The worker decodes the column's JSON text.
    with pytest.raises(PayloadDecodeError, match=message):
        decode_stored(json.dumps(stored))


def test_a_deeply_nested_stored_payload_raises_payload_decode_error_not_recursion_error():
    with pytest.raises(PayloadDecodeError, match=f"is nested more than {MAX_DEPTH} levels deep"):
        decode(nested(5_000))
    with pytest.raises(PayloadDecodeError, match="payload is nested"):
        decode_stored("[" * 5_000 + "]" * 5_000)


def test_payload_decode_error_is_an_outbox_error_exported_by_the_package():
    assert issubclass(PayloadDecodeError, OutboxError)
    assert not issubclass(PayloadDecodeError, PayloadError)
    assert "PayloadDecodeError" in django_outbox.__all__


def test_decode_stored_reads_the_columns_json_text():
    assert decode_stored(None) is None
    assert decode_stored("null") is None
    assert decode_stored('"text"') == "text"
    assert decode_stored(b'{"at": {"$date": "2026-11-21"}}') == {"at": datetime.date(2026, 11, 21)}
    # Already parsed (a driver that parses JSON columns itself).
    assert decode_stored({"$uuid": str(uuid.UUID(int=1))}) == uuid.UUID(int=1)
    assert decode_stored([1, 2]) == [1, 2]


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        ("{not json", "payload is not valid JSON"),
        (b"\xff", "payload is not valid JSON"),
        ("1" * 5_000, "payload is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "payload is nested too deep to parse"),
    ],
    ids=["syntax", "not-utf8", "long-int", "deep"],
)
def test_stored_text_that_is_not_json_raises_payload_decode_error(stored, message):
    with pytest.raises(PayloadDecodeError, match=message):
        decode_stored(stored)
