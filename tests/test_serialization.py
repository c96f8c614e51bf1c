"""Payloads are JSON, and the types Django code passes around come back unchanged."""

import datetime
import decimal
import uuid

import pytest

from django_outbox import PayloadError
from django_outbox.serialization import decode, encode

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
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=repr)
def test_round_trip(value):
    assert decode(encode(value)) == value
    assert type(decode(encode(value))) is type(value)


def test_tuples_come_back_as_lists():
    assert decode(encode((1, 2))) == [1, 2]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (object(), "payload is a builtins.object"),
        ({"user": {1, 2}}, r"payload\['user'\] is a builtins.set"),
        ({1: "a"}, "key 1 of type int"),
        ([float("nan")], r"payload\[0\] is nan"),
        (b"bytes", "builtins.bytes"),
    ],
)
def test_values_json_cannot_hold_are_refused_with_their_path(value, message):
    with pytest.raises(PayloadError, match=message):
        encode(value)
