"""A task's validate_payload refuses bad payloads at enqueue, before anything is written."""

import re

import pytest
from django.db import transaction

from django_outbox import EnqueueError, InvalidTaskError, PayloadValidationError, Task, enqueue
from django_outbox.models import Job
from tests.testapp import tasks

pytestmark = pytest.mark.django_db


def test_a_valid_payload_is_enqueued():
    job = tasks.charges.enqueue({"amount": 5})
    assert Job.objects.get(pk=job.pk).payload == {"amount": 5}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"amount": -5}, "refused the payload (it returned False)"),
        ({}, "refused the payload: a payload needs an amount"),
        ({"amount": "x"}, "refused the payload: '>' not supported"),
    ],
)
def test_a_refused_payload_is_a_clear_error_and_nothing_is_written(payload, message):
    with transaction.atomic():
        with pytest.raises(PayloadValidationError, match=re.escape(message)) as caught:
            tasks.charges.enqueue(payload)
        # The caller's transaction is still usable.
        tasks.noop.enqueue()
    assert isinstance(caught.value, EnqueueError)
    assert "validate_payload of tests.testapp.tasks.charges" in str(caught.value)
    assert list(Job.objects.values_list("task_name", flat=True)) == [tasks.noop.name]


def test_enqueue_by_name_validates_too():
    with pytest.raises(PayloadValidationError):
        enqueue("tests.testapp.tasks.charges", {"amount": 0})
    assert not Job.objects.exists()


def test_enqueue_many_validates_every_payload_and_names_the_bad_one():
    with pytest.raises(PayloadValidationError, match=r"payloads\[2\]: validate_payload"):
        tasks.charges.enqueue_many([{"amount": 1}, {"amount": 2}, {"amount": -1}])
    assert not Job.objects.exists()
    assert len(tasks.charges.enqueue_many([{"amount": 1}, {"amount": 2}])) == 2


def test_validate_payload_must_be_callable():
    with pytest.raises(InvalidTaskError, match="validate_payload must be callable"):
        Task(lambda payload: None, name="tests.bad_validator", validate_payload=42)  # type: ignore[arg-type]
