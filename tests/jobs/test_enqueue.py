"""Enqueue writes one row in the caller's transaction: rolled back, it never existed."""

import datetime
import decimal
import uuid

import pytest
from django.db import transaction
from django.utils import timezone

import django_outbox
from django_outbox import EnqueueError, PayloadError, UnknownTaskError
from django_outbox.models import Job, JobStatus
from django_outbox.serialization import MAX_DEPTH, MAX_INT_DIGITS, MAX_PAYLOAD_SIZE
from tests.helpers import count_jobs_from
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def test_inside_the_atomic_block_no_other_connection_sees_the_job(second_connection):
    with transaction.atomic():
        Note.objects.create(text="user signed up")
        job = tasks.write_note.enqueue({"text": "welcome"})
        assert Job.objects.filter(pk=job.pk).exists()
        assert count_jobs_from(second_connection) == 0
    assert count_jobs_from(second_connection) == 1


def test_a_rolled_back_transaction_leaves_no_job(second_connection):
    def sign_up_then_fail():
        with transaction.atomic():
            tasks.write_note.enqueue({"text": "welcome"})
            raise ZeroDivisionError  # The caller's code fails after enqueueing.

    with pytest.raises(ZeroDivisionError):
        sign_up_then_fail()
    assert count_jobs_from(second_connection) == 0
    assert not Job.objects.exists()


def test_a_rolled_back_savepoint_drops_only_its_jobs():
    with transaction.atomic():
        kept = tasks.noop.enqueue({"n": 1})
        try:
            with transaction.atomic():
                tasks.noop.enqueue({"n": 2})
                raise RuntimeError
        except RuntimeError:
            pass
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]


def test_outside_an_atomic_block_enqueue_autocommits(second_connection):
    tasks.noop.enqueue({"n": 1})
    assert count_jobs_from(second_connection) == 1


def test_enqueue_is_one_insert(django_assert_num_queries):
    with django_assert_num_queries(1):
        tasks.noop.enqueue({"n": 1})


def test_the_returned_job_is_saved_with_its_options():
    job = tasks.write_note.enqueue({"text": "x"}, priority=10)
    assert job.pk is not None
    assert job.status == JobStatus.READY
    assert job.queue == "emails"
    assert job.priority == 10
    assert job.max_attempts == 10
    assert job.attempts == 0
    # Filled in by the database, read back from the INSERT.
    assert abs(job.run_at - timezone.now()) < datetime.timedelta(seconds=5)
    assert job.enqueued_at is not None
    stored = Job.objects.get(pk=job.pk)
    assert stored.run_at == job.run_at
    assert stored.decoded_payload() == {"text": "x"}


@pytest.mark.parametrize("payload", [{"text": "x"}, None, [1, "two"], "text", 3.5])
def test_the_returned_job_is_the_stored_row(payload):
    delayed = datetime.timedelta(minutes=1)
    for job in (tasks.noop.enqueue(payload), tasks.noop.enqueue(payload, delay=delayed)):
        stored = Job.objects.get(pk=job.pk)
        fields = [field.attname for field in Job._meta.concrete_fields]
        assert {name: getattr(job, name) for name in fields} == {
            name: getattr(stored, name) for name in fields
        }
        assert not job._state.adding
        assert job._state.db == stored._state.db
    # A saved job saves as an UPDATE, as a job the ORM loaded would.
    job.priority = 7
    job.save(update_fields=["priority"])
    assert Job.objects.get(pk=job.pk).priority == 7


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo"])
def test_without_time_zones_a_delay_holds_in_any_zone(settings, zone):
    # SQLite's clock, which workers compare run_at with, is UTC whatever TIME_ZONE says.
    settings.USE_TZ = False
    settings.TIME_ZONE = zone
    delayed = tasks.noop.enqueue(None, delay=datetime.timedelta(minutes=30))
    now = tasks.noop.enqueue(None)
    assert set(Job.objects.runnable().values_list("pk", flat=True)) == {now.pk}
    stored = Job.objects.get(pk=delayed.pk)
    wait = stored.run_at - stored.enqueued_at
    assert abs(wait - datetime.timedelta(minutes=30)) < datetime.timedelta(seconds=5)
    assert stored.run_at == delayed.run_at


@pytest.mark.postgresql  # SQLite's clock (CURRENT_TIMESTAMP) is UTC whatever TIME_ZONE says.
def test_without_time_zones_run_at_is_local_time(settings):
    settings.USE_TZ = False
    settings.TIME_ZONE = "America/New_York"
    exact = datetime.datetime(2030, 1, 2, 3, 4, 5)
    scheduled = tasks.noop.enqueue(None, run_at=exact)
    now = tasks.noop.enqueue(None)
    assert Job.objects.get(pk=scheduled.pk).run_at == exact == scheduled.run_at
    assert abs(Job.objects.get(pk=now.pk).run_at - datetime.datetime.now()) < datetime.timedelta(
        seconds=5
    )
    assert timezone.is_naive(now.run_at)
    assert timezone.is_naive(now.enqueued_at)


def test_the_functional_form_takes_the_task_name():
    job = django_outbox.enqueue("tests.testapp.tasks.write_note", {"text": "x"}, queue="other")
    assert job.task_name == "tests.testapp.tasks.write_note"
    assert job.queue == "other"


def test_delay_and_run_at_schedule_the_job():
    before = timezone.now()
    delayed = tasks.noop.enqueue(None, delay=datetime.timedelta(minutes=5))
    by_seconds = tasks.noop.enqueue(None, delay=90)
    exact = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    scheduled = tasks.noop.enqueue(None, run_at=exact)
    assert delayed.run_at - before >= datetime.timedelta(minutes=5)
    assert delayed.run_at - before < datetime.timedelta(minutes=5, seconds=5)
    assert by_seconds.run_at - before >= datetime.timedelta(seconds=90)
    assert Job.objects.get(pk=scheduled.pk).run_at == exact
    assert not Job.objects.runnable().filter(pk__in=[delayed.pk, scheduled.pk]).exists()


def test_payload_types_round_trip_through_the_database():
    payload = {
        "at": datetime.datetime(2026, 11, 21, 9, 0, tzinfo=datetime.timezone.utc),
        "on": datetime.date(2026, 11, 21),
        "amount": decimal.Decimal("19.99"),
        "id": uuid.UUID(int=7),
        "tags": ["a", "b"],
    }
    job = tasks.noop.enqueue(payload)
    assert Job.objects.get(pk=job.pk).decoded_payload() == payload


def test_edge_values_round_trip_through_the_database():
    """What encode accepts, both databases give back: jsonb keeps numbers as decimals, SQLite
    keeps the JSON text."""
    deepest: object = "leaf"
    for _ in range(MAX_DEPTH - 1):
        deepest = [deepest]
    payload = {
        "big": 2**100,
        "negative": -(2**100),
        "longest": -(10**MAX_INT_DIGITS - 1),
        "floats": [1e16, -1.5e300, 1.7976931348623157e308, 5e-324, 0.1, 123456789012345.6],
        "text": 'naïve 😀 \u200b \x01 "quoted" \\',
        "ключ 😀": None,
        "deepest": deepest,
    }
    job = tasks.noop.enqueue(payload)
    [batched] = tasks.noop.enqueue_many([payload])
    for stored in Job.objects.filter(pk__in=[job.pk, batched.pk]):
        decoded = stored.decoded_payload()
        assert decoded == payload
        assert [type(value) for value in decoded["floats"]] == [float] * 6


def test_a_payload_at_the_size_limit_is_stored():
    text = "x" * (MAX_PAYLOAD_SIZE - len('{"blob": ""}'))
    job = tasks.noop.enqueue({"blob": text})
    assert Job.objects.get(pk=job.pk).payload == {"blob": text}


BAD_INPUT = [
    (lambda: django_outbox.enqueue("no.such.task", {}), UnknownTaskError, "No task is registered"),
    (lambda: tasks.noop.enqueue({"user": object()}), PayloadError, "cannot be stored as JSON"),
    (lambda: tasks.noop.enqueue({}, delay=-1), EnqueueError, "must not be negative"),
    (lambda: tasks.noop.enqueue({}, delay="soon"), EnqueueError, "timedelta or a number"),  # type: ignore[arg-type]
    (
        lambda: tasks.noop.enqueue({}, delay=1, run_at=timezone.now()),
        EnqueueError,
        "not both",
    ),
    (
        lambda: tasks.noop.enqueue({}, run_at=datetime.datetime(2030, 1, 1)),
        EnqueueError,
        "no time zone",
    ),
    (lambda: tasks.noop.enqueue({}, run_at="2030-01-01"), EnqueueError, "must be a datetime"),  # type: ignore[arg-type]
    (lambda: tasks.noop.enqueue({}, priority="high"), EnqueueError, "priority must be"),  # type: ignore[arg-type]
    (lambda: tasks.noop.enqueue({}, priority=2**40), EnqueueError, "priority must be"),
    (lambda: tasks.noop.enqueue({}, queue=""), EnqueueError, "queue name"),
    (lambda: tasks.noop.enqueue({}, colour="red"), TypeError, "unknown option .colour."),  # type: ignore[call-arg]
    (lambda: django_outbox.enqueue(tasks.noop.func, {}), EnqueueError, "@django_outbox.task"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "error", "message"), BAD_INPUT)
def test_bad_input_raises_clearly_and_the_transaction_stays_usable(call, error, message):
    with transaction.atomic():
        Note.objects.create(text="before")
        with pytest.raises(error, match=message):
            call()
        # Nothing reached the database: the caller's transaction carries on and commits.
        Note.objects.create(text="after")
        tasks.noop.enqueue({"ok": True})
    assert Note.objects.count() == 2
    assert Job.objects.count() == 1


def test_enqueue_error_is_a_value_error():
    assert issubclass(EnqueueError, ValueError)
    assert issubclass(UnknownTaskError, EnqueueError)


def test_a_job_sent_to_another_queue_takes_that_queues_defaults(settings):
    settings.OUTBOX = {
        **settings.OUTBOX,
        "QUEUES": {"bulk": {"MAX_ATTEMPTS": 2, "PRIORITY": -3}},
    }
    job = tasks.noop.enqueue({}, queue="bulk")
    assert (job.max_attempts, job.priority) == (2, -3)
    # A task's own option still wins: write_note declares max_attempts=10.
    assert tasks.write_note.enqueue({"text": "x"}, queue="bulk").max_attempts == 10
