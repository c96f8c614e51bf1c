"""OUTBOX["CRON"] and OUTBOX["CRON_TIMEZONE"]: each problem gives its check id and a hint."""

from __future__ import annotations

import io

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_outbox import task
from django_outbox.conf import get_settings
from django_outbox.cron import declared_entries
from django_outbox.tasks import registry

pytestmark = pytest.mark.django_db

TASK = "tests.testapp.tasks.note_cron_tick"
VALID = {"TASK": TASK, "SCHEDULE": "0 3 * * *"}


def cron(**entries):
    return {"CRON": entries}


INVALID = [
    pytest.param({"CRON": [VALID]}, "django_outbox.E030", id="E030-a-list"),
    pytest.param(cron(nightly="0 3 * * *"), "django_outbox.E030", id="E030-entry-not-a-dict"),
    pytest.param(cron(nightly={"TASK": TASK}), "django_outbox.E030", id="E030-no-schedule"),
    pytest.param(cron(nightly={**VALID, "ARGS": [1]}), "django_outbox.E030", id="E030-unknown-key"),
    pytest.param({"CRON": {"": VALID}}, "django_outbox.E030", id="E030-empty-name"),
    pytest.param({"CRON": {"n" * 201: VALID}}, "django_outbox.E030", id="E030-long-name"),
    pytest.param({"CRON": {"a\x00b": VALID}}, "django_outbox.E030", id="E030-nul-in-name"),
    pytest.param(
        cron(nightly={**VALID, "SCHEDULE": "0 3 * *"}), "django_outbox.E031", id="E031-4-fields"
    ),
    pytest.param(
        cron(nightly={**VALID, "SCHEDULE": "0 25 * * *"}), "django_outbox.E031", id="E031-hour"
    ),
    pytest.param(
        cron(nightly={**VALID, "SCHEDULE": None}), "django_outbox.E031", id="E031-not-text"
    ),
    pytest.param(
        cron(nightly={**VALID, "TASK": "myapp.tasks.nope"}),
        "django_outbox.E032",
        id="E032-unknown-task",
    ),
    pytest.param(cron(nightly={**VALID, "TASK": 3}), "django_outbox.E032", id="E032-not-text"),
    pytest.param({"CRON_TIMEZONE": "Paris"}, "django_outbox.E034", id="E034-default-zone"),
    pytest.param(
        cron(nightly={**VALID, "TIMEZONE": "Europe/Pariss"}),
        "django_outbox.E034",
        id="E034-entry-zone",
    ),
    pytest.param(
        cron(nightly={**VALID, "PAYLOAD": {"when": object()}}),
        "django_outbox.E035",
        id="E035-payload-not-json",
    ),
    pytest.param(cron(nightly={**VALID, "QUEUE": ""}), "django_outbox.E035", id="E035-queue"),
    pytest.param(
        cron(nightly={**VALID, "PRIORITY": "high"}), "django_outbox.E035", id="E035-priority"
    ),
]


def outbox_errors(messages):
    return [message for message in messages if message.id.startswith("django_outbox.")]


@pytest.mark.parametrize(("outbox", "check_id"), INVALID)
def test_each_invalid_cron_setting_gives_exactly_its_check_id_with_a_hint(outbox, check_id):
    with override_settings(OUTBOX=outbox):
        errors = outbox_errors(run_checks())
    assert [error.id for error in errors] == [check_id], [error.msg for error in errors]
    assert errors[0].hint


@pytest.mark.parametrize(
    "outbox",
    [
        pytest.param(cron(nightly=VALID), id="minimal"),
        pytest.param(
            {
                "CRON_TIMEZONE": "Europe/Paris",
                "CRON": {
                    "nightly-cleanup": {
                        **VALID,
                        "PAYLOAD": {"days": 30},
                        "QUEUE": "maintenance",
                        "PRIORITY": -5,
                        "TIMEZONE": "America/New_York",
                    },
                    "hourly": {"TASK": TASK, "SCHEDULE": "@hourly"},
                },
            },
            id="every-key",
        ),
        pytest.param({"CRON": {}, "CRON_TIMEZONE": "UTC"}, id="empty"),
    ],
)
def test_valid_cron_settings_give_no_errors(outbox):
    with override_settings(OUTBOX=outbox):
        assert outbox_errors(run_checks()) == []


def test_get_settings_refuses_a_bad_schedule():
    with (
        override_settings(OUTBOX=cron(nightly={**VALID, "SCHEDULE": "often"})),
        pytest.raises(ImproperlyConfigured, match="not a cron expression"),
    ):
        get_settings()


def test_manage_py_check_fails_on_an_unknown_task_naming_the_id():
    with (
        override_settings(OUTBOX=cron(nightly={**VALID, "TASK": "myapp.tasks.nope"})),
        pytest.raises(SystemCheckError, match=r"django_outbox\.E032.*myapp\.tasks\.nope"),
    ):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.fixture
def cron_task():
    """A task declared with @task(cron=...), registered for the test only."""

    @task(name="tests.cron.hourly", cron="@hourly")
    def hourly(payload):
        return None

    yield hourly
    registry.unregister(hourly.name)


def test_a_task_declared_with_cron_is_an_entry_in_the_default_zone(cron_task):
    with override_settings(OUTBOX={"CRON_TIMEZONE": "Europe/Paris"}):
        (entry,) = declared_entries()
    assert (entry.name, entry.task_name, entry.source) == ("tests.cron.hourly",) * 2 + ("task",)
    assert entry.schedule == "@hourly Europe/Paris"
    assert entry.payload is None


def test_a_settings_entry_named_like_a_cron_task_is_refused_and_wins_until_fixed(cron_task):
    outbox = {"CRON": {"tests.cron.hourly": {"TASK": TASK, "SCHEDULE": "0 3 * * *"}}}
    with override_settings(OUTBOX=outbox):
        errors = outbox_errors(run_checks())
        (entry,) = declared_entries()
    assert [error.id for error in errors] == ["django_outbox.E033"]
    assert "another name" in errors[0].hint
    assert (entry.task_name, entry.source) == (TASK, "settings")


def test_a_payload_the_task_refuses_is_reported():
    @task(name="tests.cron.strict", validate_payload=lambda payload: isinstance(payload, dict))
    def strict(payload):
        return None

    try:
        with override_settings(
            OUTBOX=cron(nightly={"TASK": strict.name, "SCHEDULE": "@daily", "PAYLOAD": [1]})
        ):
            errors = outbox_errors(run_checks())
    finally:
        registry.unregister(strict.name)
    assert [error.id for error in errors] == ["django_outbox.E035"]
    assert "validate_payload of tests.cron.strict refused" in errors[0].msg


def test_a_cron_task_whose_validate_payload_refuses_none_is_reported():
    @task(name="tests.cron.needs_payload", cron="@daily", validate_payload=lambda p: p is not None)
    def needs_payload(payload):
        return None

    try:
        errors = outbox_errors(run_checks())
    finally:
        registry.unregister(needs_payload.name)
    assert [error.id for error in errors] == ["django_outbox.E035"]
    assert "its jobs have no payload" in errors[0].msg
