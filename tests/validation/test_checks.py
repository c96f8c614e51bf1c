"""The OUTBOX setting: each system check by id, lazy settings that follow override_settings,
and how queue and task options override the global ones."""

import datetime
import io
import math
from typing import Any, cast

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import override_settings
from django.utils import timezone

from django_outbox import RetryPolicy, Task
from django_outbox.checks import check_outbox_setting
from django_outbox.conf import get_settings
from django_outbox.jobs.transitions import prune_finished
from django_outbox.management.arguments import (
    non_negative_int,
    non_negative_seconds,
    positive_int,
    prefetch_argument,
)
from django_outbox.models import Job, JobStatus
from django_outbox.validation.bounds import (
    CONCURRENCY_MAX,
    DAY,
    ERROR_HISTORY_MAX,
    HEARTBEAT_SECONDS_MAX,
    HEARTBEAT_SECONDS_MIN,
    HEARTBEATS_PER_LEASE,
    LEASE_SECONDS_MAX,
    LEASE_SECONDS_MIN,
    MAX_ATTEMPTS_MAX,
    POLL_SECONDS_MAX,
    POLL_SECONDS_MIN,
    PREFETCH_MAX,
    PROCESSES_MAX,
    RETENTION_MAX,
    RETRY_DELAY_MAX,
    RETRY_FACTOR_MAX,
    SHUTDOWN_TIMEOUT_MAX,
)
from django_outbox.validation.setting import DEFAULTS
from tests.processes import SHORT_LEASE
from tests.testapp import tasks

# run_checks() and manage.py check run the model checks too, which ask the database about its
# features.
pytestmark = pytest.mark.django_db

LONG_NAME = "q" * 101
INF, NAN = math.inf, math.nan

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
    # E004: each duration's bounds; NaN and infinities, which plain comparisons let through.
    pytest.param({"POLL_SECONDS": NAN}, "django_outbox.E004", id="E004-poll-nan"),
    pytest.param({"POLL_SECONDS": INF}, "django_outbox.E004", id="E004-poll-inf"),
    pytest.param({"POLL_SECONDS": 1e-9}, "django_outbox.E004", id="E004-poll-busy-loop"),
    pytest.param(
        {"POLL_SECONDS": POLL_SECONDS_MIN / 2}, "django_outbox.E004", id="E004-poll-below-min"
    ),
    pytest.param(
        {"POLL_SECONDS": POLL_SECONDS_MAX + 1}, "django_outbox.E004", id="E004-poll-above-max"
    ),
    pytest.param({"HEARTBEAT_SECONDS": NAN}, "django_outbox.E004", id="E004-beat-nan"),
    pytest.param(
        {"HEARTBEAT_SECONDS": HEARTBEAT_SECONDS_MIN / 2},
        "django_outbox.E004",
        id="E004-beat-below-min",
    ),
    pytest.param(
        {"HEARTBEAT_SECONDS": HEARTBEAT_SECONDS_MAX + 1, "LEASE_SECONDS": LEASE_SECONDS_MAX},
        "django_outbox.E004",
        id="E004-beat-above-max",
    ),
    pytest.param({"LEASE_SECONDS": INF}, "django_outbox.E004", id="E004-lease-inf"),
    pytest.param({"LEASE_SECONDS": -INF}, "django_outbox.E004", id="E004-lease-minus-inf"),
    pytest.param({"LEASE_SECONDS": NAN}, "django_outbox.E004", id="E004-lease-nan"),
    pytest.param({"LEASE_SECONDS": 1e300}, "django_outbox.E004", id="E004-lease-1e300"),
    # A huge int: math.isfinite() would overflow on it.
    pytest.param({"LEASE_SECONDS": 10**400}, "django_outbox.E004", id="E004-lease-huge-int"),
    pytest.param(
        {"LEASE_SECONDS": LEASE_SECONDS_MIN / 2, "HEARTBEAT_SECONDS": HEARTBEAT_SECONDS_MIN},
        "django_outbox.E004",
        id="E004-lease-below-min",
    ),
    pytest.param(
        {"LEASE_SECONDS": LEASE_SECONDS_MAX + 1}, "django_outbox.E004", id="E004-lease-above-max"
    ),
    pytest.param({"SHUTDOWN_TIMEOUT": NAN}, "django_outbox.E004", id="E004-shutdown-nan"),
    pytest.param({"SHUTDOWN_TIMEOUT": INF}, "django_outbox.E004", id="E004-shutdown-inf"),
    pytest.param(
        {"SHUTDOWN_TIMEOUT": SHUTDOWN_TIMEOUT_MAX + 1},
        "django_outbox.E004",
        id="E004-shutdown-above-max",
    ),
    # E005: counts.
    pytest.param({"MAX_ATTEMPTS": 0}, "django_outbox.E005", id="E005-zero-attempts"),
    pytest.param({"CONCURRENCY": 2.5}, "django_outbox.E005", id="E005-float"),
    pytest.param({"ERROR_HISTORY": -1}, "django_outbox.E005", id="E005-negative"),
    pytest.param({"PREFETCH": -1}, "django_outbox.E005", id="E005-negative-prefetch"),
    pytest.param({"PREFETCH": 1.5}, "django_outbox.E005", id="E005-float-prefetch"),
    pytest.param({"PREFETCH": "fast"}, "django_outbox.E005", id="E005-string-prefetch"),
    pytest.param({"PREFETCH": "Auto"}, "django_outbox.E005", id="E005-capitalised-auto"),
    pytest.param({"PROCESSES": 0}, "django_outbox.E005", id="E005-zero-processes"),
    pytest.param({"PROCESSES": "2"}, "django_outbox.E005", id="E005-string-processes"),
    # E005: each count's maximum.
    pytest.param({"CONCURRENCY": 10**9}, "django_outbox.E005", id="E005-concurrency-1e9"),
    pytest.param(
        {"CONCURRENCY": CONCURRENCY_MAX + 1}, "django_outbox.E005", id="E005-concurrency-max"
    ),
    pytest.param({"CONCURRENCY": INF}, "django_outbox.E005", id="E005-concurrency-inf"),
    pytest.param({"PROCESSES": PROCESSES_MAX + 1}, "django_outbox.E005", id="E005-processes-max"),
    pytest.param({"PREFETCH": PREFETCH_MAX + 1}, "django_outbox.E005", id="E005-prefetch-max"),
    pytest.param(
        {"ERROR_HISTORY": ERROR_HISTORY_MAX + 1}, "django_outbox.E005", id="E005-history-max"
    ),
    pytest.param(
        {"MAX_ATTEMPTS": MAX_ATTEMPTS_MAX + 1}, "django_outbox.E005", id="E005-attempts-max"
    ),
    # E006: a heartbeat too slow for the lease.
    pytest.param(
        {"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 6}, "django_outbox.E006", id="E006-slow-beat"
    ),
    pytest.param(
        {"LEASE_SECONDS": HEARTBEATS_PER_LEASE * 1 - 0.01, "HEARTBEAT_SECONDS": 1},
        "django_outbox.E006",
        id="E006-just-under-the-ratio",
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
    # E007: finite delays below the maximum, so that now + delay stays a datetime.
    pytest.param({"RETRY": {"BASE_DELAY": INF}}, "django_outbox.E007", id="E007-base-inf"),
    pytest.param({"RETRY": {"MAX_DELAY": INF}}, "django_outbox.E007", id="E007-max-inf"),
    pytest.param({"RETRY": {"MAX_DELAY": NAN}}, "django_outbox.E007", id="E007-max-nan"),
    pytest.param({"RETRY": {"MAX_DELAY": 1e15}}, "django_outbox.E007", id="E007-max-1e15"),
    pytest.param(
        {"RETRY": {"BASE_DELAY": RETRY_DELAY_MAX + 1}}, "django_outbox.E007", id="E007-base-max"
    ),
    pytest.param(
        {"RETRY": {"MAX_DELAY": RETRY_DELAY_MAX + 1}}, "django_outbox.E007", id="E007-max-max"
    ),
    pytest.param(
        {"RETRY": {"FACTOR": RETRY_FACTOR_MAX + 1}}, "django_outbox.E007", id="E007-factor-max"
    ),
    pytest.param({"RETRY": {"FACTOR": INF}}, "django_outbox.E007", id="E007-factor-inf"),
    pytest.param({"RETRY": {"JITTER": NAN}}, "django_outbox.E007", id="E007-jitter-nan"),
    pytest.param({"RETRY": {"JITTER": -0.1}}, "django_outbox.E007", id="E007-jitter-negative"),
    pytest.param(
        {"QUEUES": {"emails": {"RETRY": {"MAX_DELAY": INF}}}},
        "django_outbox.E007",
        id="E007-queue-inf",
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
    # E070: a queue's concurrency caps and rate limits.
    pytest.param({"QUEUES": {"crm": {"CONCURRENCY": 0}}}, "django_outbox.E070", id="E070-cap-zero"),
    pytest.param(
        {"QUEUES": {"crm": {"CONCURRENCY_PER_KEY": "5"}}}, "django_outbox.E070", id="E070-cap-text"
    ),
    pytest.param(
        {"QUEUES": {"mail": {"RATE_LIMIT": "10 per second"}}}, "django_outbox.E070", id="E070-rate"
    ),
    pytest.param(
        {"QUEUES": {"mail": {"RATE_LIMIT_PER_KEY": 10}}}, "django_outbox.E070", id="E070-rate-int"
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
    pytest.param({"RETENTION": {"SUCCEEDED": INF}}, "django_outbox.E010", id="E010-inf"),
    pytest.param({"RETENTION": {"FAILED": NAN}}, "django_outbox.E010", id="E010-nan"),
    pytest.param({"RETENTION": {"FAILED": 1e15}}, "django_outbox.E010", id="E010-1e15"),
    pytest.param(
        {"RETENTION": {"FAILED": RETENTION_MAX + 1}}, "django_outbox.E010", id="E010-above-max"
    ),
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
                "LEASE_SECONDS": 15,
                "HEARTBEAT_SECONDS": 5,
                "PREFETCH": 0,
                "PROCESSES": 1,
                "RETENTION": {"SUCCEEDED": None, "FAILED": None},
            },
            id="edges",
        ),
        pytest.param(
            {
                "POLL_SECONDS": POLL_SECONDS_MIN,
                "HEARTBEAT_SECONDS": HEARTBEAT_SECONDS_MIN,
                "LEASE_SECONDS": LEASE_SECONDS_MIN,
                "SHUTDOWN_TIMEOUT": 0,
                "RETRY": {"BASE_DELAY": 0, "MAX_DELAY": 0, "FACTOR": 1, "JITTER": 0},
                "RETENTION": {"SUCCEEDED": 0.001, "FAILED": 0.001},
            },
            id="minima",
        ),
        pytest.param(
            {
                "POLL_SECONDS": POLL_SECONDS_MAX,
                "HEARTBEAT_SECONDS": HEARTBEAT_SECONDS_MAX,
                "LEASE_SECONDS": LEASE_SECONDS_MAX,
                "SHUTDOWN_TIMEOUT": SHUTDOWN_TIMEOUT_MAX,
                "MAX_ATTEMPTS": MAX_ATTEMPTS_MAX,
                "CONCURRENCY": CONCURRENCY_MAX,
                "PROCESSES": PROCESSES_MAX,
                "PREFETCH": PREFETCH_MAX,
                "ERROR_HISTORY": ERROR_HISTORY_MAX,
                "RETRY": {
                    "BASE_DELAY": RETRY_DELAY_MAX,
                    "MAX_DELAY": RETRY_DELAY_MAX,
                    "FACTOR": RETRY_FACTOR_MAX,
                    "JITTER": 1,
                },
                "RETENTION": {"SUCCEEDED": RETENTION_MAX, "FAILED": RETENTION_MAX},
            },
            id="maxima",
        ),
        pytest.param(
            {"LEASE_SECONDS": HEARTBEATS_PER_LEASE * 2, "HEARTBEAT_SECONDS": 2},
            id="lease-exactly-three-heartbeats",
        ),
        # What the process tests' workers run with.
        pytest.param(
            {
                "LEASE_SECONDS": float(SHORT_LEASE["OUTBOX_TEST_LEASE_SECONDS"]),
                "HEARTBEAT_SECONDS": float(SHORT_LEASE["OUTBOX_TEST_HEARTBEAT_SECONDS"]),
            },
            id="short-lease",
        ),
        pytest.param({"RETENTION": {"SUCCEEDED": 0.5}}, id="retention-partial"),
        pytest.param({"RETENTION": {}}, id="retention-empty"),
        pytest.param({"PREFETCH": 100, "PROCESSES": 8}, id="prefetch-processes"),
        pytest.param({"PREFETCH": "auto"}, id="prefetch-auto"),
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


def suite_outbox() -> dict[str, Any]:
    """The test settings' OUTBOX (typed: django-stubs knows no project setting)."""
    return cast(dict[str, Any], settings.OUTBOX)


def test_get_settings_follows_override_settings_and_returns_to_the_suite_settings():
    suite = get_settings()
    assert suite.lease_seconds == float(suite_outbox()["LEASE_SECONDS"])
    with override_settings(OUTBOX={"LEASE_SECONDS": 30, "DEFAULT_QUEUE": "jobs"}):
        inside = get_settings()
        assert (inside.lease_seconds, inside.default_queue) == (30.0, "jobs")
        # Defaults fill what the override leaves out.
        assert inside.heartbeat_seconds == DEFAULTS["HEARTBEAT_SECONDS"]
        assert get_settings() is inside
    after = get_settings()
    assert after == suite
    assert after.lease_seconds == float(suite_outbox()["LEASE_SECONDS"])


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
            "CANCELLED": DEFAULTS["RETENTION"]["CANCELLED"],
        }
    with override_settings(OUTBOX={"PREFETCH": 7, "PROCESSES": 3}):
        assert (get_settings().prefetch, get_settings().processes) == (7, 3)


def test_prefetch_is_auto_by_default_and_another_word_is_refused_naming_what_is_accepted():
    with override_settings(OUTBOX={}):
        assert get_settings().prefetch == "auto"
    with override_settings(OUTBOX={"PREFETCH": "fast"}):
        [error] = check_outbox_setting()
        with pytest.raises(ImproperlyConfigured, match='must be "auto" or an integer'):
            get_settings()
    assert error.id == "django_outbox.E005"
    assert error.msg == (
        "OUTBOX['PREFETCH'] is 'fast'; it must be \"auto\" or an integer from 0 to 100000."
    )


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


@pytest.mark.parametrize(
    ("outbox", "expected"),
    [
        pytest.param(
            {"LEASE_SECONDS": INF},
            ["OUTBOX['LEASE_SECONDS'] is inf, which is not a finite number", "from 1 to 604800"],
            id="lease-inf",
        ),
        pytest.param(
            {"POLL_SECONDS": NAN},
            ["OUTBOX['POLL_SECONDS'] is nan, which is not a finite number", "from 0.05 to 3600"],
            id="poll-nan",
        ),
        pytest.param(
            {"HEARTBEAT_SECONDS": 0.001},
            ["OUTBOX['HEARTBEAT_SECONDS'] is 0.001, out of range", "from 0.1 to 3600"],
            id="beat-too-short",
        ),
        pytest.param(
            {"RETRY": {"MAX_DELAY": 1e15}},
            ["OUTBOX['RETRY']['MAX_DELAY'] is 1000000000000000.0, out of range", "0 to 2592000"],
            id="retry-1e15",
        ),
        pytest.param(
            {"RETENTION": {"FAILED": INF}},
            ["OUTBOX['RETENTION']['FAILED'] is inf, which is not a finite number", "<= 315360000"],
            id="retention-inf",
        ),
        pytest.param(
            {"CONCURRENCY": 10**9},
            ["OUTBOX['CONCURRENCY'] is 1000000000, out of range", "from 1 to 1000"],
            id="concurrency-1e9",
        ),
        pytest.param(
            {"LEASE_SECONDS": 2, "HEARTBEAT_SECONDS": 1},
            ["OUTBOX['LEASE_SECONDS'] (2) must be at least 3 times", "raise LEASE_SECONDS to 3"],
            id="lease-ratio",
        ),
    ],
)
def test_the_message_names_the_key_the_problem_and_the_allowed_range(outbox, expected):
    with override_settings(OUTBOX=outbox):
        [error] = check_outbox_setting()
    text = f"{error.msg} {error.hint}"
    for part in expected:
        assert part in text


@pytest.mark.parametrize(
    ("outbox", "ids"),
    [
        pytest.param({"LEASE_SECONDS": INF}, ["E004"], id="lease-inf"),
        pytest.param({"LEASE_SECONDS": 1e300}, ["E004"], id="lease-1e300"),
        pytest.param({"POLL_SECONDS": INF}, ["E004"], id="poll-inf"),
        pytest.param({"POLL_SECONDS": 1e-9}, ["E004"], id="poll-1e-9"),
        # Under the floors an idle worker would run hundreds of transactions a second.
        pytest.param({"HEARTBEAT_SECONDS": 0.01}, ["E004"], id="beat-0.01"),
        pytest.param({"POLL_SECONDS": 0.01}, ["E004"], id="poll-0.01"),
        pytest.param(
            {"LEASE_SECONDS": 0.002, "HEARTBEAT_SECONDS": 0.001}, ["E004", "E004"], id="tiny-lease"
        ),
        pytest.param(
            {"RETRY": {"BASE_DELAY": INF, "MAX_DELAY": INF}}, ["E007", "E007"], id="retry-inf"
        ),
        pytest.param({"RETRY": {"BASE_DELAY": 1e15}}, ["E007"], id="retry-1e15"),
        pytest.param({"RETENTION": {"SUCCEEDED": INF}}, ["E010"], id="retention-inf"),
        pytest.param({"RETENTION": {"FAILED": 1e15}}, ["E010"], id="retention-1e15"),
    ],
)
def test_settings_that_made_a_worker_misbehave_fail_manage_py_check(outbox, ids):
    """Each setting that once made a worker misbehave now stops the worker's start."""
    with override_settings(OUTBOX=outbox):
        assert [error.id for error in check_outbox_setting()] == [f"django_outbox.{i}" for i in ids]
        with pytest.raises(SystemCheckError, match=ids[0]):
            call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


def test_the_largest_delays_and_retention_allowed_are_datetimes_the_database_stores():
    """A retry at RETRY_DELAY_MAX and a prune at RETENTION_MAX compute and store fine."""
    job = tasks.noop.enqueue()
    later = timezone.now() + datetime.timedelta(seconds=RETRY_DELAY_MAX)
    Job.objects.filter(pk=job.pk).update(run_at=later)
    assert Job.objects.get(pk=job.pk).run_at == later
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.SUCCEEDED,
        finished_at=timezone.now() - datetime.timedelta(seconds=RETENTION_MAX + DAY),
    )
    assert prune_finished("default", {"SUCCEEDED": RETENTION_MAX, "FAILED": RETENTION_MAX}) == 1
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--shutdown-timeout", "nan"], "--shutdown-timeout: expected a finite number, got 'nan'"),
        (["--shutdown-timeout", "inf"], "--shutdown-timeout: expected a finite number, got 'inf'"),
        (
            ["--shutdown-timeout=-inf"],
            "--shutdown-timeout: expected a finite number, got '-inf'",
        ),
        (["--shutdown-timeout", "1e300"], "--shutdown-timeout: expected seconds <= 86400"),
        (["--shutdown-timeout", "86401"], "--shutdown-timeout: expected seconds <= 86400"),
        (
            ["--prefetch", "100001"],
            "--prefetch: expected auto or a whole number from 0 to 100000, got '100001'",
        ),
        (
            ["--prefetch", "nan"],
            "--prefetch: expected auto or a whole number from 0 to 100000, got 'nan'",
        ),
        (
            ["--prefetch", "fast"],
            "--prefetch: expected auto or a whole number from 0 to 100000, got 'fast'",
        ),
        (["--concurrency", "inf"], "--concurrency: expected a whole number, got 'inf'"),
        (["--concurrency", str(10**9)], "--concurrency: expected a number <= 1000"),
        (["--processes", "257"], "--processes: expected a number <= 256"),
        (["--max-jobs", str(10**400)], "--max-jobs: expected a number <= 2147483647"),
    ],
    ids=[
        "shutdown-nan",
        "shutdown-inf",
        "shutdown-minus-inf",
        "shutdown-1e300",
        "shutdown-above-max",
        "prefetch-above-max",
        "prefetch-nan",
        "prefetch-unknown-word",
        "concurrency-inf",
        "concurrency-above-max",
        "processes-above-max",
        "max-jobs-huge",
    ],
)
def test_the_worker_refuses_non_finite_and_out_of_range_options(arguments, message):
    with pytest.raises(CommandError, match="Error: argument ") as raised:
        call_command("run_outbox_worker", "--burst", *arguments)
    assert message in str(raised.value)
    assert not Job.objects.exists()


def test_the_worker_options_accept_their_bounds():
    assert non_negative_seconds("0") == 0.0
    assert non_negative_seconds(str(SHUTDOWN_TIMEOUT_MAX)) == SHUTDOWN_TIMEOUT_MAX
    assert non_negative_int(str(PREFETCH_MAX)) == PREFETCH_MAX
    assert prefetch_argument(str(PREFETCH_MAX)) == PREFETCH_MAX
    assert prefetch_argument("0") == 0
    assert prefetch_argument("auto") == "auto"
    assert positive_int(str(MAX_ATTEMPTS_MAX)) == MAX_ATTEMPTS_MAX
