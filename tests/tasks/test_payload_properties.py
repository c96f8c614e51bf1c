"""Properties of payload encoding over generated payloads, poison values included.

For any payload, ``encode`` either returns JSON that reads back as the payload, or raises
PayloadError (and only for a payload that breaks a documented rule); ``decode`` raises nothing
but PayloadDecodeError whatever a row holds; and ``enqueue`` either stores the payload or
refuses it with the caller's transaction still usable.
"""

import contextlib
import datetime
import decimal
import json
import math
import uuid

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from django_outbox import EnqueuedJobs, PayloadDecodeError, PayloadError
from django_outbox.models import Job
from django_outbox.serialization import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_PAYLOAD_SIZE,
    decode,
    decode_stored,
    encode,
)
from tests.testapp import tasks
from tests.testapp.models import Note

# No example database: it would write a .hypothesis directory into the checkout.
PURE = settings(max_examples=200, deadline=None, database=None)
WITH_DATABASE = settings(max_examples=60, deadline=None, database=None)

TAGS = ["$datetime", "$date", "$time", "$decimal", "$uuid", "$float", "$dict"]

# Any code point, NUL and lone surrogates included; and often the characters that matter.
texts = st.text(st.characters(exclude_categories=()), max_size=12) | st.text(
    st.sampled_from(["a", "\x00", "\udcff", "\x01", "é", "😀", "\\", '"']), max_size=6
)
offsets = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes))
)
time_zones = st.none() | st.just(datetime.timezone.utc) | offsets
integers = (
    st.integers()
    | st.integers(-(10**700), 10**700)
    | st.sampled_from([2**63, -(2**100), 10**MAX_INT_DIGITS - 1])
    # Built when drawn: a strategy holding an int of over 4,300 digits could not print itself.
    | st.sampled_from([MAX_INT_DIGITS, 4_300]).map(lambda digits: -(10**digits))
)
scalars = (
    st.none()
    | st.booleans()
    | integers
    | st.floats()
    | texts
    | st.binary(max_size=4)
    | st.datetimes(timezones=time_zones)
    | st.dates()
    | st.times(timezones=time_zones)
    # NaN never equals itself (and a signalling one raises when compared): left out.
    | st.decimals(allow_nan=False)
    | st.uuids()
)
keys = st.sampled_from(TAGS) | texts | st.integers() | st.none() | st.floats() | st.binary()
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=12,
)


def nest(value, depth, in_dicts):
    for _ in range(depth):
        value = {"child": value} if in_dicts else [value]
    return value


def with_a_cycle(value):
    loop = [value]
    loop.append({"back": loop})
    return loop


# The common payload, a flat dict of plain values, which encode checks on a faster path.
flat_dicts = st.dictionaries(
    st.sampled_from(TAGS) | texts,
    st.none() | st.booleans() | integers | st.floats() | texts,
    max_size=5,
)


def near_the_size_limit(character_and_width, extra):
    """A flat dict whose JSON is about MAX_PAYLOAD_SIZE long, however its characters escape."""
    character, width = character_and_width
    return {"blob": character * ((MAX_PAYLOAD_SIZE - len('{"blob": ""}')) // width + extra)}


payloads = st.one_of(
    values,
    flat_dicts,
    st.builds(nest, values, st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3), st.booleans()),
    st.builds(with_a_cycle, values),
    st.builds(
        near_the_size_limit,
        st.sampled_from([("x", 1), ("\x01", 6), ("é", 6), ("😀", 12)]),
        st.integers(-1, 1),
    ),
    # The same near the limit on the full walk, which a list takes.
    st.integers(MAX_PAYLOAD_SIZE - 8, MAX_PAYLOAD_SIZE).map(lambda n: ["é" * (n // 6)]),
)


def refusal(value, depth=1, ancestors=()):
    """Return which payload rule ``value`` breaks, but for the size limit; None if none."""
    if isinstance(value, decimal.Decimal):
        return None if value.is_finite() else "NaN or infinity"
    if value is None or isinstance(value, bool | datetime.date | datetime.time | uuid.UUID):
        return None
    if isinstance(value, str):
        if "\x00" in value:
            return "a NUL character"
        if any(0xD800 <= ord(character) <= 0xDFFF for character in value):
            return "a lone surrogate"
        return None
    if isinstance(value, int):
        return "a long integer" if abs(value) >= 10**MAX_INT_DIGITS else None
    if isinstance(value, float):
        return None if math.isfinite(value) else "NaN or infinity"
    if isinstance(value, list | tuple | dict):
        if any(value is ancestor for ancestor in ancestors):
            return "a cycle"
        if depth > MAX_DEPTH:
            return "deep nesting"
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    return "a key that is not a str"
                if problem := refusal(key):
                    return problem
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            if problem := refusal(item, depth + 1, (*ancestors, value)):
                return problem
        return None
    return f"a {type(value).__name__}"


def as_read_back(value):
    """Return ``value`` as decode gives it back: tuples become lists."""
    if isinstance(value, list | tuple):
        return [as_read_back(item) for item in value]
    if isinstance(value, dict):
        return {key: as_read_back(item) for key, item in value.items()}
    return value


def strings_in(data):
    """Yield every string of JSON data, keys included."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, list):
        for item in data:
            yield from strings_in(item)
    elif isinstance(data, dict):
        for key, item in data.items():
            yield key
            yield from strings_in(item)


@PURE
@given(payloads)
def test_encode_returns_json_that_decodes_to_the_payload_or_raises_payload_error(value):
    problem = refusal(value)
    refused: str | None
    try:
        encoded = encode(value)
    except PayloadError as error:
        refused = str(error)
    else:
        refused = None
    if refused is not None:
        assert problem is not None or "bytes of JSON" in refused, f"refused: {refused}"
        return
    assert problem is None, f"accepted a payload with {problem}"
    text = json.dumps(encoded, allow_nan=False)
    assert len(text) <= MAX_PAYLOAD_SIZE
    # What PostgreSQL would refuse: NUL, and text that is not UTF-8.
    assert not any("\x00" in string for string in strings_in(encoded))
    json.dumps(encoded, ensure_ascii=False).encode("utf-8")
    assert decode(json.loads(text)) == as_read_back(value)


@PURE
@given(flat_dicts)
def test_flat_dicts_get_the_same_answer_on_the_fast_path_as_on_the_full_walk(value):
    """encode checks a flat dict of plain values on a faster path; inside a list, the same dict
    takes the full walk."""
    outcomes = []
    for payload, unwrap in ((value, lambda data: data), ([value], lambda data: data[0])):
        try:
            outcomes.append(unwrap(encode(payload)))
        except PayloadError as error:
            outcomes.append(str(error).replace("payload[0]", "payload", 1))
    assert outcomes[0] == outcomes[1]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(TAGS) | st.text(max_size=4), children, max_size=3)
        # A tag alone, with any value, as a row edited by hand or by another version may hold.
        | st.dictionaries(st.sampled_from(TAGS), children, min_size=1, max_size=1)
    ),
    max_leaves=12,
)


@PURE
@given(
    st.one_of(
        json_values, st.builds(nest, json_values, st.integers(MAX_DEPTH - 5, 300), st.booleans())
    )
)
def test_decode_returns_or_raises_payload_decode_error_whatever_a_row_holds(value):
    with contextlib.suppress(PayloadDecodeError):
        decode(value)


@PURE
@given(st.one_of(st.text(), st.binary(), json_values.map(json.dumps)))
def test_decode_stored_returns_or_raises_payload_decode_error_whatever_the_column_holds(stored):
    with contextlib.suppress(PayloadDecodeError):
        decode_stored(stored)


def stored_text(job_id):
    """The payload column as the worker's claim reads it: JSON text."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT payload FROM {Job._meta.db_table} WHERE id = %s", [job_id])
        (text,) = cursor.fetchone()
    return text


@pytest.mark.django_db(transaction=True)
@WITH_DATABASE
@given(payloads)
def test_enqueue_stores_the_payload_or_refuses_it_leaving_the_transaction_usable(value):
    with transaction.atomic():
        before = Note.objects.create(text="before")
        try:
            job = tasks.noop.enqueue(value)
        except PayloadError:
            job = None
        after = Note.objects.create(text="after")
    assert Note.objects.filter(pk__in=[before.pk, after.pk]).count() == 2
    if job is not None:
        assert Job.objects.get(pk=job.pk).decoded_payload() == as_read_back(value)
        assert decode_stored(stored_text(job.pk)) == as_read_back(value)


@pytest.mark.django_db(transaction=True)
@WITH_DATABASE
@given(st.lists(payloads, min_size=1, max_size=3))
def test_enqueue_many_stores_every_payload_or_none_of_them(batch):
    with transaction.atomic():
        before = Note.objects.create(text="before")
        try:
            jobs = tasks.noop.enqueue_many(batch)
        except PayloadError:
            jobs = EnqueuedJobs([], jobs=[])
        after = Note.objects.create(text="after")
    assert Note.objects.filter(pk__in=[before.pk, after.pk]).count() == 2
    if jobs:
        stored = [decode_stored(stored_text(job.pk)) for job in jobs]
        assert stored == [as_read_back(value) for value in batch]
