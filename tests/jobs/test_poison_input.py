"""Bad input at enqueue raises a clear error before any SQL; the caller's transaction goes on.

PostgreSQL refuses some of these values only inside the INSERT (NUL characters, lone
surrogates), which would abort the caller's whole transaction; others fail deep in Python
(huge integers, deep nesting, unrepresentable dates). Each case here is checked on the
database the suite runs on, and both of the caller's rows must commit around it.
"""

import datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_outbox
from django_outbox import EnqueueError, InvalidTaskError, PayloadError, Task
from django_outbox.serialization import MAX_DEPTH, MAX_INT_DIGITS, MAX_PAYLOAD_SIZE
from django_outbox.validation.bounds import MAX_DELAY
from tests.helpers import count_jobs_from
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)

UTC = datetime.timezone.utc
FIVE_HOURS = datetime.timedelta(hours=5)


def nested(depth):
    value: object = None
    for _ in range(depth):
        value = [value]
    return value


def circular():
    loop: list[object] = []
    loop.append(loop)
    return {"loop": loop}


POISON_PAYLOADS = [
    pytest.param({"name": "a\x00b"}, r"payload\['name'\] contains a NUL character", id="nul"),
    pytest.param({"a\x00": 1}, r"payload has the key 'a\\x00', which contains a NUL", id="nul-key"),
    pytest.param(
        {"items": [{}, {}, {}, {"name": "\udcff"}]},
        r"payload\['items'\]\[3\]\['name'\] contains a lone surrogate",
        id="surrogate",
    ),
    pytest.param(
        {"\udcff": 1}, r"payload has the key '\\udcff', which contains a lone", id="surrogate-key"
    ),
    pytest.param(
        {"n": 10**4300}, rf"payload\['n'\] is an integer of more than {MAX_INT_DIGITS}", id="int"
    ),
    pytest.param(
        nested(10_000),
        rf"payload(\[0\]){{8}}\.\.\.\(88 more\)\.\.\.(\[0\]){{4}} is nested more than {MAX_DEPTH}",
        id="deep",
    ),
    pytest.param(circular(), r"payload\['loop'\]\[0\] is the list that contains it", id="loop"),
    pytest.param(
        {"blob": "x" * MAX_PAYLOAD_SIZE},
        rf"payload is {MAX_PAYLOAD_SIZE + 12:,} bytes of JSON; the limit is {MAX_PAYLOAD_SIZE:,}",
        id="size",
    ),
    pytest.param({"data": b"\x00"}, r"payload\['data'\] is a builtins.bytes", id="bytes"),
]


def far_future():
    return timezone.now() + MAX_DELAY + datetime.timedelta(days=1)


BAD_OPTIONS = [
    pytest.param({"delay": float("nan")}, "delay must be a finite number", id="delay-nan"),
    pytest.param({"delay": float("inf")}, "delay must be a finite number", id="delay-inf"),
    pytest.param({"delay": 1e20}, "delay must be at most 3650 days", id="delay-1e20"),
    pytest.param({"delay": 10**400}, "delay must be at most 3650 days", id="delay-huge-int"),
    pytest.param({"delay": datetime.timedelta.max}, "delay must be at most", id="delay-max"),
    pytest.param(
        {"delay": MAX_DELAY + datetime.timedelta(seconds=1)}, "delay must be at most", id="delay"
    ),
    pytest.param(
        {"run_at": datetime.datetime.max.replace(tzinfo=UTC)},
        "run_at must be at most 3650 days from now",
        id="run_at-max",
    ),
    pytest.param({"run_at": far_future()}, "run_at must be at most", id="run_at-far"),
    pytest.param(
        # Five hours ahead of UTC: a time before year 1 there.
        {"run_at": datetime.datetime.min.replace(tzinfo=datetime.timezone(FIVE_HOURS))},
        "run_at 0001-01-01 00:00:00[+]05:00 cannot be represented in UTC",
        id="run_at-min",
    ),
    pytest.param({"queue": "bulk\x00"}, "queue name 'bulk\\\\x00' contains a NUL", id="queue-nul"),
    pytest.param({"queue": "\udcff"}, "contains a lone surrogate", id="queue-surrogate"),
]


def notes_seen_from(other):
    with other.cursor() as cursor:
        cursor.execute(f"SELECT text FROM {Note._meta.db_table} ORDER BY id")
        return [text for (text,) in cursor.fetchall()]


def assert_refused_before_any_sql(call, error, message, second_connection):
    """``call`` raises ``error`` inside the caller's atomic block, which then commits."""
    with transaction.atomic():
        Note.objects.create(text="before")
        with CaptureQueriesContext(connection) as queries, pytest.raises(error, match=message):
            call()
        assert queries.captured_queries == []
        Note.objects.create(text="after")
    assert notes_seen_from(second_connection) == ["before", "after"]
    assert count_jobs_from(second_connection) == 0


@pytest.mark.parametrize(("payload", "message"), POISON_PAYLOADS)
def test_enqueue_refuses_a_poison_payload(payload, message, second_connection):
    assert_refused_before_any_sql(
        lambda: tasks.noop.enqueue(payload), PayloadError, message, second_connection
    )


@pytest.mark.parametrize(("payload", "message"), POISON_PAYLOADS)
def test_enqueue_many_refuses_a_poison_payload_naming_its_index(
    payload, message, second_connection
):
    assert_refused_before_any_sql(
        lambda: tasks.noop.enqueue_many([{"ok": 1}, payload]),
        PayloadError,
        rf"payloads\[1\]: {message}",
        second_connection,
    )


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_enqueue_refuses_a_bad_option_naming_it(options, message, second_connection):
    assert_refused_before_any_sql(
        lambda: tasks.noop.enqueue({"ok": 1}, **options), EnqueueError, message, second_connection
    )


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_enqueue_many_refuses_a_bad_option_naming_it(options, message, second_connection):
    assert_refused_before_any_sql(
        lambda: tasks.noop.enqueue_many([{"ok": 1}], **options),
        EnqueueError,
        message,
        second_connection,
    )


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            "tests.testapp.tasks.noop\x00",
            "task name 'tests.testapp.tasks.noop\\\\x00' contains a NUL",
        ),
        ("tests.testapp.tasks.\udcff", "task name .* contains a lone surrogate"),
        # Declared with a name no database can store.
        (Task(tasks.noop.func, name="named\x00"), "task name 'named\\\\x00' contains a NUL"),
    ],
    ids=["name-nul", "name-surrogate", "declared-name"],
)
def test_task_and_queue_names_are_checked_like_payload_strings(task, message, second_connection):
    assert_refused_before_any_sql(
        lambda: django_outbox.enqueue(task, {}), EnqueueError, message, second_connection
    )


def test_a_task_declared_with_a_queue_no_database_can_store_is_refused_at_once():
    """Like OUTBOX["QUEUES"] names (check E008): refused where it is written, not at enqueue."""
    with pytest.raises(InvalidTaskError, match=r"queue name 'q\\x00' contains a NUL"):
        Task(tasks.noop.func, queue="q\x00")


@pytest.mark.parametrize(
    ("payloads", "message"),
    [
        (None, r"payloads must be an iterable of payloads \(e.g. a list of dicts\), not NoneType"),
        (42, r"payloads must be an iterable of payloads \(e.g. a list of dicts\), not int"),
        ("abc", "not a str: it would enqueue one job per character"),
        (b"abc", "not a bytes: it would enqueue one job per byte"),
        ({"user_id": 1}, r"not a dict: it would enqueue one job per key"),
    ],
)
def test_enqueue_many_refuses_what_is_not_a_collection_of_payloads(
    payloads, message, second_connection
):
    assert_refused_before_any_sql(
        lambda: tasks.noop.enqueue_many(payloads), EnqueueError, message, second_connection
    )


def test_the_longest_delay_and_the_latest_run_at_are_accepted():
    before = timezone.now()
    delayed = tasks.noop.enqueue(None, delay=MAX_DELAY)
    assert delayed.run_at >= before + MAX_DELAY
    latest = timezone.now() + MAX_DELAY - datetime.timedelta(seconds=5)
    assert tasks.noop.enqueue(None, run_at=latest).run_at == latest
    # Any past time means now.
    past = datetime.datetime(1, 1, 1, tzinfo=UTC)
    assert tasks.noop.enqueue(None, run_at=past).run_at == past
