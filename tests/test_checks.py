"""The OUTBOX setting: each system check by id, lazy settings that follow override_settings,
and how queue and task options override the global ones."""

import io

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_outbox import RetryPolicy, Task
from django_outbox.checks import check_outbox_setting
from django_outbox.conf import DEFAULTS, get_settings
from django_outbox.models import Job
from tests.testapp import tasks

# run_checks() and manage.py check run the model checks too, which ask the database about its
# features.
pytestmark = pytest.mark.django_db

LONG_NAME = "q" * 101

INVALID = [
    # E001: not a dict.
    pytest.param("default", "django_outbox.E001", id="E001-string"),
    pytest.param([("MAX_ATTEMPTS", 3)], "django_outbox.E001", id="E001-list"),
    # E002: unknown keys.
    pytest.param({"MAX_ATTEMPT": 3}, "django_outbox.E002", id="E002-misspelt"),
    # E003: DATABASE is not an alias.
    pytest.param({"DATABASE": "jobs"}, "django_outbox.E003", id="E003-unknown-alias"),
    pytest.param({"DATABASE": ["default"]}, "django_outbox.E003", id="E003-unhashable"),
    # E004: durations.
    pytest.param({"POLL_SECONDS": 0}, "django_outbox.E004", id="E004-zero-poll"),
    pytest.param({"HEARTBEAT_SECONDS": -1}, "django_outbox.E004", id="E004-negative-beat"),
    pytest.param({"POLL_SECONDS": "1"}, "django_outbox.E004", id="E004-string"),
    pytest.param({"POLL_SECONDS": True}, "django_outbox.E004", id="E004-bool"),
    pytest.param({"SHUTDOWN_TIMEOUT": -1}, "django_outbox.E004", id="E004-negative"),
    # E005: counts.
    pytest.param({"MAX_ATTEMPTS": 0}, "django_outbox.E005", id="E005-zero-attempts"),
    pytest.param({"CONCURRENCY": 2.5}, "django_outbox.E005", id="E005-float"),
    pytest.param({"ERROR_HISTORY": -1}, "django_outbox.E005", id="E005-negative"),
    pytest.param({"PREFETCH": -1}, "django_outbox.E005", id="E005-negative-prefetch"),
    pytest.param({"PREFETCH": 1.5}, "django_outbox.E005", id="E005-float-prefetch"),
    pytest.param({"PROCESSES": 0}, "django_outbox.E005", id="E005-zero-processes"),
    pytest.param({"PROCESSES": "2"}, "django_outbox.E005", id="E005-string-processes"),
    # E006: a heartbeat too slow for the lease.
    pytest.param(
        {"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 6}, "django_outbox.E006", id="E006-slow-beat"
    ),
    # E007: RETRY.
    pytest.param({"RETRY": [1, 2]}, "django_outbox.E007", id="E007-not-a-dict"),
    pytest.param({"RETRY": {"DELAY": 1}}, "django_outbox.E007", id="E007-unknown-key"),
    pytest.param({"RETRY": {"FACTOR": 0.5}}, "django_outbox.E007", id="E007-factor"),
    pytest.param({"RETRY": {"JITTER": 1.5}}, "django_outbox.E007", id="E007-jitter"),
    pytest.param({"RETRY": {"BASE_DELAY": -1}}, "django_outbox.E007", id="E007-negative"),
    pytest.param({"RETRY": {"MAX_DELAY": "1h"}}, "django_outbox.E007", id="E007-string"),
    pytest.param(
        {"QUEUES": {"emails": {"RETRY": {"FACTOR": 0}}}}, "django_outbox.E007", id="E007-queue"
    ),
    # E008: QUEUES.
    pytest.param({"QUEUES": ["emails"]}, "django_outbox.E008", id="E008-not-a-dict"),
    pytest.param({"QUEUES": {"": {}}}, "django_outbox.E008", id="E008-empty-name"),
    pytest.param({"QUEUES": {LONG_NAME: {}}}, "django_outbox.E008", id="E008-long-name"),
    pytest.param({"QUEUES": {"emails": 5}}, "django_outbox.E008", id="E008-options"),
    pytest.param({"QUEUES": {"emails": {"TIMEOUT": 1}}}, "django_outbox.E008", id="E008-key"),
    pytest.param(
        {"QUEUES": {"emails": {"MAX_ATTEMPTS": 0}}}, "django_outbox.E008", id="E008-attempts"
    ),
    pytest.param(
        {"QUEUES": {"emails": {"PRIORITY": "high"}}}, "django_outbox.E008", id="E008-priority"
    ),
    # Tasks and enqueue reject priorities outside the 32-bit column; the setting must too.
    pytest.param(
        {"QUEUES": {"emails": {"PRIORITY": 2**31}}}, "django_outbox.E008", id="E008-priority-range"
    ),
    # E009: DEFAULT_QUEUE.
    pytest.param({"DEFAULT_QUEUE": ""}, "django_outbox.E009", id="E009-empty"),
    pytest.param({"DEFAULT_QUEUE": None}, "django_outbox.E009", id="E009-none"),
    pytest.param({"DEFAULT_QUEUE": LONG_NAME}, "django_outbox.E009", id="E009-long"),
    # E010: RETENTION.
    pytest.param({"RETENTION": 86400}, "django_outbox.E010", id="E010-not-a-dict"),
    pytest.param({"RETENTION": None}, "django_outbox.E010", id="E010-none"),
    pytest.param({"RETENTION": {"SUCCESS": 60}}, "django_outbox.E010", id="E010-unknown-key"),
    pytest.param({"RETENTION": {"SUCCEEDED": 0}}, "django_outbox.E010", id="E010-zero"),
    pytest.param({"RETENTION": {"FAILED": -1}}, "django_outbox.E010", id="E010-negative"),
    pytest.param({"RETENTION": {"FAILED": "7d"}}, "django_outbox.E010", id="E010-string"),
    pytest.param({"RETENTION": {"SUCCEEDED": True}}, "django_outbox.E010", id="E010-bool"),
]


def outbox_errors(messages):
    return [message for message in messages if message.id.startswith("django_outbox.")]


@pytest.mark.parametrize(("outbox", "check_id"), INVALID)
def test_each_invalid_setting_gives_exactly_its_check_id_with_a_hint(outbox, check_id):
    with override_settings(OUTBOX=outbox):
        errors = outbox_errors(run_checks())
    assert [error.id for error in errors] == [check_id]
    assert errors[0].hint
    assert errors[0].is_serious()


@pytest.mark.parametrize(
    "outbox",
    [
        pytest.param({}, id="empty"),
        pytest.param(DEFAULTS, id="defaults"),
        pytest.param(settings.OUTBOX, id="suite"),
        pytest.param(
            {
                "QUEUES": {"emails": {"MAX_ATTEMPTS": 5, "PRIORITY": -3, "RETRY": {"FACTOR": 1}}},
                "RETRY": {"JITTER": 0, "BASE_DELAY": 0.5},
                "ERROR_HISTORY": 0,
                "SHUTDOWN_TIMEOUT": 0,
                "LEASE_SECONDS": 10,
                "HEARTBEAT_SECONDS": 5,
                "PREFETCH": 0,
                "PROCESSES": 1,
                "RETENTION": {"SUCCEEDED": None, "FAILED": None},
            },
            id="edges",
        ),
        pytest.param({"RETENTION": {"SUCCEEDED": 0.5}}, id="retention-partial"),
        pytest.param({"RETENTION": {}}, id="retention-empty"),
        pytest.param({"PREFETCH": 100, "PROCESSES": 8}, id="prefetch-processes"),
    ],
)
def test_valid_settings_give_no_errors(outbox):
    with override_settings(OUTBOX=outbox):
        assert check_outbox_setting() == []
        assert outbox_errors(run_checks()) == []


def test_a_missing_setting_gives_no_errors():
    with override_settings():
        del settings.OUTBOX
        assert check_outbox_setting() == []


def test_every_problem_is_reported_not_only_the_first():
    with override_settings(OUTBOX={"POLL_SECONDS": 0, "CONCURRENCY": 0, "DEFAULT_QUEUE": ""}):
        ids = [error.id for error in check_outbox_setting()]
    assert ids == ["django_outbox.E004", "django_outbox.E005", "django_outbox.E009"]


def test_manage_py_check_fails_on_a_bad_setting_naming_the_id():
    with (
        override_settings(OUTBOX={"MAX_ATTEMPTS": 0}),
        pytest.raises(SystemCheckError, match=r"django_outbox\.E005"),
    ):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


def test_manage_py_check_passes_with_the_suite_settings():
    out = io.StringIO()
    call_command("check", stdout=out, stderr=io.StringIO())
    assert "no issues" in out.getvalue()


@pytest.mark.parametrize(("outbox", "check_id"), INVALID)
def test_get_settings_refuses_an_invalid_setting(outbox, check_id):
    with override_settings(OUTBOX=outbox), pytest.raises(ImproperlyConfigured, match="OUTBOX"):
        get_settings()


def test_get_settings_follows_override_settings_and_returns_to_the_suite_settings():
    suite = get_settings()
    assert suite.lease_seconds == float(settings.OUTBOX["LEASE_SECONDS"])
    with override_settings(OUTBOX={"LEASE_SECONDS": 30, "DEFAULT_QUEUE": "jobs"}):
        inside = get_settings()
        assert (inside.lease_seconds, inside.default_queue) == (30.0, "jobs")
        # Defaults fill what the override leaves out.
        assert inside.heartbeat_seconds == DEFAULTS["HEARTBEAT_SECONDS"]
        assert get_settings() is inside
    after = get_settings()
    assert after == suite
    assert after.lease_seconds == float(settings.OUTBOX["LEASE_SECONDS"])


def test_every_retention_problem_is_reported():
    with override_settings(OUTBOX={"RETENTION": {"SUCCEEDED": 0, "FAILED": "x", "OTHER": 1}}):
        errors = check_outbox_setting()
    assert [error.id for error in errors] == ["django_outbox.E010"] * 3
    assert all(error.hint for error in errors)


def test_a_partial_retention_setting_keeps_the_other_default():
    with override_settings(OUTBOX={"RETENTION": {"SUCCEEDED": None}}):
        assert get_settings().retention == {
            "SUCCEEDED": None,
            "FAILED": DEFAULTS["RETENTION"]["FAILED"],
        }
    with override_settings(OUTBOX={"PREFETCH": 7, "PROCESSES": 3}):
        assert (get_settings().prefetch, get_settings().processes) == (7, 3)


def test_a_partial_retry_setting_keeps_the_other_defaults():
    with override_settings(OUTBOX={"RETRY": {"BASE_DELAY": 5}}):
        assert get_settings().retry == {**DEFAULTS["RETRY"], "BASE_DELAY": 5}


QUEUED = {
    "MAX_ATTEMPTS": 7,
    "RETRY": {"BASE_DELAY": 2.0, "JITTER": 0.0},
    "QUEUES": {"emails": {"MAX_ATTEMPTS": 5, "PRIORITY": 3, "RETRY": {"FACTOR": 3.0}}},
}


@override_settings(OUTBOX=QUEUED)
def test_a_queue_s_own_options_override_the_global_ones():
    emails = get_settings().queue_options("emails")
    assert (emails.max_attempts, emails.priority) == (5, 3)
    assert emails.retry == {"BASE_DELAY": 2.0, "FACTOR": 3.0, "MAX_DELAY": 3600.0, "JITTER": 0.0}
    other = get_settings().queue_options("other")
    assert (other.max_attempts, other.priority) == (7, 0)
    assert other.retry == {"BASE_DELAY": 2.0, "FACTOR": 2.0, "MAX_DELAY": 3600.0, "JITTER": 0.0}


@override_settings(OUTBOX=QUEUED)
def test_tasks_take_their_queue_s_options_unless_they_set_their_own():
    # noop: default queue, nothing of its own.
    assert (tasks.noop.max_attempts, tasks.noop.priority) == (7, 0)
    assert tasks.noop.retry_policy == RetryPolicy(base_delay=2.0, factor=2.0, jitter=0.0)
    # write_note: queue "emails", its own max_attempts=10.
    assert (tasks.write_note.max_attempts, tasks.write_note.priority) == (10, 3)
    assert tasks.write_note.retry_policy == RetryPolicy(base_delay=2.0, factor=3.0, jitter=0.0)
    own = RetryPolicy(base_delay=9.0)
    mine = Task(tasks.noop.func, name="own", queue="emails", max_attempts=2, priority=-1, retry=own)
    assert (mine.max_attempts, mine.priority, mine.retry_policy) == (2, -1, own)


@override_settings(OUTBOX=QUEUED)
def test_enqueued_jobs_carry_the_resolved_options():
    plain = tasks.noop.enqueue()
    note = tasks.write_note.enqueue({"text": "hi"})
    assert (plain.queue, plain.max_attempts, plain.priority) == ("default", 7, 0)
    assert (note.queue, note.max_attempts, note.priority) == ("emails", 10, 3)
    stored = Job.objects.get(pk=note.pk)
    assert (stored.max_attempts, stored.priority) == (10, 3)


@override_settings(OUTBOX={"DEFAULT_QUEUE": "jobs"})
def test_tasks_without_a_queue_follow_the_default_queue_setting():
    assert tasks.noop.queue == "jobs"
    assert tasks.write_note.queue == "emails"
