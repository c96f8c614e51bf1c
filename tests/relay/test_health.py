"""outbox_health's relay check: the oldest unsent message's age, and blocked messages."""

from __future__ import annotations

import datetime

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_outbox import Message, MessageStatus, publish
from django_outbox.stats.probes import Thresholds, check_health

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_broker")]


def relay_check(**thresholds):
    (check,) = [c for c in check_health(Thresholds(**thresholds)).checks if c.name == "relay"]
    return check


def test_nothing_waiting_is_ok():
    check = relay_check()
    assert (check.status, check.details["oldest_unsent_age"]) == ("ok", 0.0)


def test_an_old_unsent_message_warns_then_fails_the_probe(capsys):
    message = publish("orders", {"n": 1})
    Message.objects.filter(pk=message.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=10)
    )
    check = relay_check()
    assert check.status == "warning"
    assert check.details["oldest_unsent_age"] >= 599
    assert relay_check(max_unsent_seconds=300).status == "unhealthy"
    with pytest.raises(CommandError, match="relay: oldest unsent message waits"):
        call_command("outbox_health", "--max-unsent-age", "300")


def test_blocked_messages_warn():
    message = publish("orders", {"n": 1}, key="k")
    Message.objects.filter(pk=message.pk).update(status=MessageStatus.BLOCKED)
    check = relay_check()
    assert check.status == "warning"
    assert check.details["blocked"] == 1
    assert "1 blocked" in check.message
