"""OUTBOX["BROKERS"] and OUTBOX["RELAY"]: each problem by its check id, with a hint."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_outbox.conf import get_settings

pytestmark = pytest.mark.django_db

MEMORY = {"BACKEND": "django_outbox.relay.brokers.memory.InMemoryBroker"}


def outbox_errors(messages):
    return [message for message in messages if message.id.startswith("django_outbox.")]


@pytest.mark.parametrize(
    ("outbox", "check_id"),
    [
        pytest.param({"BROKERS": []}, "django_outbox.E040", id="brokers-not-a-dict"),
        pytest.param({"BROKERS": {"": MEMORY}}, "django_outbox.E040", id="empty-name"),
        pytest.param({"BROKERS": {"a": "redis"}}, "django_outbox.E040", id="entry-not-a-dict"),
        pytest.param(
            {"BROKERS": {"a": {**MEMORY, "OPTIONS": {}, "URL": "x"}}},
            "django_outbox.E040",
            id="unknown-key",
        ),
        pytest.param(
            {"BROKERS": {"a": {**MEMORY, "OPTIONS": []}}}, "django_outbox.E040", id="options-list"
        ),
        pytest.param({"BROKERS": {"a": {}}}, "django_outbox.E041", id="no-backend"),
        pytest.param(
            {"BROKERS": {"a": {"BACKEND": "no.such.Broker"}}}, "django_outbox.E041", id="no-import"
        ),
        pytest.param(
            {"BROKERS": {"a": {"BACKEND": "django_outbox.conf.get_settings"}}},
            "django_outbox.E041",
            id="not-a-broker",
        ),
        pytest.param({"RELAY": []}, "django_outbox.E042", id="relay-not-a-dict"),
        pytest.param({"RELAY": {"BATCH": 10}}, "django_outbox.E042", id="relay-unknown-key"),
        pytest.param({"RELAY": {"BATCH_SIZE": 0}}, "django_outbox.E043", id="batch-zero"),
        pytest.param({"RELAY": {"LEASE_SECONDS": "30"}}, "django_outbox.E043", id="lease-text"),
        pytest.param({"RELAY": {"INBOX_RETENTION": None}}, "django_outbox.E043", id="inbox-none"),
        pytest.param({"RELAY": {"MAX_REFUSALS": 1.5}}, "django_outbox.E043", id="refusals-float"),
    ],
)
def test_each_invalid_relay_setting_gives_its_check_id_with_a_hint(outbox, check_id):
    with override_settings(OUTBOX=outbox):
        errors = outbox_errors(run_checks())
    assert [error.id for error in errors] == [check_id]
    assert errors[0].hint


def test_valid_relay_settings_give_no_errors_and_are_read():
    outbox = {
        "BROKERS": {"events": {**MEMORY, "OPTIONS": {"refuse_topics": []}}},
        "RELAY": {"BATCH_SIZE": 50, "RETENTION": None, "LEASE_SECONDS": 10},
    }
    with override_settings(OUTBOX=outbox):
        assert outbox_errors(run_checks()) == []
        relay = get_settings().relay
        assert (relay.batch_size, relay.lease_seconds, relay.retention) == (50, 10.0, None)
        assert relay.poll_seconds == 1.0
