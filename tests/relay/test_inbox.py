"""receive_once: a redelivered message has no second effect, even when deliveries race."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from django.db import connections
from django.utils import timezone

from django_outbox import receive_once
from django_outbox.conf import get_settings
from django_outbox.models import InboxEntry
from django_outbox.relay.housekeeping import prune_inbox
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def handle(message_id: str, text: str) -> bool:
    with receive_once("billing", message_id) as first:
        if first:
            Note.objects.create(text=text)
        return first


def test_the_second_delivery_has_no_effect():
    assert handle("m-1", "one") is True
    assert handle("m-1", "one again") is False
    assert list(Note.objects.values_list("text", flat=True)) == ["one"]
    # Another consumer handles the same message for itself.
    with receive_once("shipping", "m-1") as first:
        assert first


def test_a_failed_handling_records_nothing_so_the_redelivery_does_the_work():
    def handle_and_crash() -> None:
        with receive_once("billing", "m-2") as first:
            assert first
            Note.objects.create(text="half done")
            raise RuntimeError("handler crashed")

    with pytest.raises(RuntimeError):
        handle_and_crash()
    assert not Note.objects.exists()
    assert handle("m-2", "done") is True
    assert list(Note.objects.values_list("text", flat=True)) == ["done"]


@pytest.mark.postgresql
def test_two_deliveries_at_once_have_one_effect():
    """The second waits on the unique index for the first one's transaction, then sees it."""
    results: list[bool] = []
    inside = threading.Event()

    def slow_first() -> None:
        try:
            with receive_once("billing", "m-3") as first:
                results.append(first)
                inside.set()
                time.sleep(0.5)
                if first:
                    Note.objects.create(text="slow")
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_first)
    thread.start()
    assert inside.wait(5)
    results.append(handle("m-3", "fast"))
    thread.join(10)
    assert sorted(results) == [False, True]
    assert Note.objects.count() == 1


def test_bad_ids_are_refused():
    with pytest.raises(ValueError, match="message_id"), receive_once("billing", ""):
        pass


def test_handled_ids_are_forgotten_after_the_retention():
    handle("old", "x")
    handle("new", "y")
    InboxEntry.objects.filter(message_id="old").update(
        received_at=timezone.now() - datetime.timedelta(days=8)
    )
    assert prune_inbox(get_settings().database, 7 * 86400) == 1
    assert list(InboxEntry.objects.values_list("message_id", flat=True)) == ["new"]
