"""Codecs: a task's payloads through encode() into JSON and decode() back, per task or for all."""

import decimal

import pytest

from django_outbox import InvalidTaskError, PayloadError, Task
from django_outbox.checks import check_outbox_setting
from django_outbox.models import Job, JobStatus
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_tasks_codec_stores_json_and_hands_the_handler_the_value():
    order = tasks.Order(number=7, total=decimal.Decimal("19.90"))
    job = tasks.ships_order.enqueue(order)
    # Stored as JSON (the Decimal by the built-in rules), never pickled.
    assert Job.objects.get(pk=job.pk).payload == {"number": 7, "total": {"$decimal": "19.90"}}
    run_worker()
    assert Note.objects.get().text == "order 7 for 19.90"
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_enqueue_many_encodes_each_payload():
    orders = [tasks.Order(number=n, total=decimal.Decimal(n)) for n in range(3)]
    tasks.ships_order.enqueue_many(orders)
    run_worker()
    assert Note.objects.count() == 3


def test_a_payload_the_codec_refuses_is_a_clear_error_and_nothing_is_written():
    with pytest.raises(
        PayloadError,
        match=r"the codec of .*ships_order could not encode it: "
        r"TypeError: expected an Order, got dict",
    ):
        tasks.ships_order.enqueue({"number": 1})
    with pytest.raises(PayloadError, match=r"payloads\[1\]: .*the codec"):
        tasks.ships_order.enqueue_many([tasks.Order(1, decimal.Decimal(1)), "no"])
    assert not Job.objects.exists()


def test_a_row_the_codec_cannot_decode_fails_for_good_with_the_reason():
    job = tasks.ships_order.enqueue(tasks.Order(number=1, total=decimal.Decimal(1)))
    Job.objects.filter(pk=job.pk).update(payload={"number": 1})  # Edited by hand: no total.
    run_worker()
    failed = Job.objects.get(pk=job.pk)
    assert failed.status == JobStatus.FAILED
    assert "cannot be decoded" in failed.last_error
    assert "total" in failed.last_error


def test_the_settings_codec_serves_every_task_without_one(settings):
    settings.OUTBOX = {**settings.OUTBOX, "CODEC": "tests.codecs_for_tests.Wrapped"}
    job = tasks.write_note.enqueue({"text": "through the codec"})
    assert Job.objects.get(pk=job.pk).payload == {"wrapped": {"text": "through the codec"}}
    run_worker()
    assert Note.objects.get().text == "through the codec"
    # A task's own codec wins.
    order = tasks.ships_order.enqueue(tasks.Order(number=2, total=decimal.Decimal(2)))
    assert "wrapped" not in Job.objects.get(pk=order.pk).payload


@pytest.mark.parametrize(
    ("codec", "message"),
    [
        ("tests.codecs_for_tests.Nothing", "cannot be imported"),
        ("tests.codecs_for_tests.NOT_A_CODEC", "needs encode(value) and decode(data)"),
        (42, "must be a dotted path"),
    ],
)
def test_a_bad_codec_setting_is_a_system_check_error(settings, codec, message):
    settings.OUTBOX = {"CODEC": codec}
    errors = check_outbox_setting()
    assert [error.id for error in errors] == ["django_outbox.E012"]
    assert message in errors[0].msg


def test_a_tasks_codec_must_have_encode_and_decode():
    with pytest.raises(InvalidTaskError, match="needs encode"):
        Task(lambda payload: None, name="tests.bad_codec", codec=object())  # type: ignore[arg-type]
