"""Cron expressions: which ticks they name, in a time zone, and which texts they refuse."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from django_outbox import InvalidTaskError, Task
from django_outbox.cron import CronExpression, CronExpressionError

UTC = datetime.timezone.utc


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "zone", "at", "latest", "following"),
    [
        # At a tick, the tick itself is the latest (not yet past) and the next is after it.
        (
            "*/5 * * * *",
            "UTC",
            utc(2026, 11, 25, 3, 5),
            utc(2026, 11, 25, 3, 5),
            utc(2026, 11, 25, 3, 10),
        ),
        (
            "*/5 * * * *",
            "UTC",
            utc(2026, 11, 25, 3, 7, 30),
            utc(2026, 11, 25, 3, 5),
            utc(2026, 11, 25, 3, 10),
        ),
        # Microseconds after a tick still read that tick as the latest.
        (
            "* * * * *",
            "UTC",
            utc(2026, 11, 25, 3, 7, 0) + datetime.timedelta(microseconds=5),
            utc(2026, 11, 25, 3, 7),
            utc(2026, 11, 25, 3, 8),
        ),
        (
            "0 3 * * *",
            "UTC",
            utc(2026, 11, 25, 2, 59, 59),
            utc(2026, 11, 24, 3, 0),
            utc(2026, 11, 25, 3, 0),
        ),
        # Weekdays only: Saturday 28 November looks back to Friday and ahead to Monday.
        (
            "0 9 * * 1-5",
            "UTC",
            utc(2026, 11, 28, 12, 0),
            utc(2026, 11, 27, 9, 0),
            utc(2026, 11, 30, 9, 0),
        ),
        (
            "@hourly",
            "UTC",
            utc(2026, 11, 25, 3, 30),
            utc(2026, 11, 25, 3, 0),
            utc(2026, 11, 25, 4, 0),
        ),
        (
            "@daily",
            "UTC",
            utc(2026, 11, 25, 3, 30),
            utc(2026, 11, 25, 0, 0),
            utc(2026, 11, 26, 0, 0),
        ),
        (
            "@monthly",
            "UTC",
            utc(2026, 11, 25, 3, 30),
            utc(2026, 11, 1, 0, 0),
            utc(2026, 12, 1, 0, 0),
        ),
        # 03:00 in Paris is 02:00 UTC in winter (UTC+1).
        (
            "0 3 * * *",
            "Europe/Paris",
            utc(2026, 11, 25, 2, 30),
            utc(2026, 11, 25, 2, 0),
            utc(2026, 11, 26, 2, 0),
        ),
        # ... and 01:00 UTC in summer (UTC+2).
        (
            "0 3 * * *",
            "Europe/Paris",
            utc(2026, 7, 1, 12, 0),
            utc(2026, 7, 1, 1, 0),
            utc(2026, 7, 2, 1, 0),
        ),
        # Spring forward (29 March 2026, 02:00 -> 03:00 in Paris): 02:30 does not exist that
        # day and runs once at the jump, 03:00 local (01:00 UTC), as Debian's cron does.
        (
            "30 2 * * *",
            "Europe/Paris",
            utc(2026, 3, 29, 0, 0),
            utc(2026, 3, 28, 1, 30),
            utc(2026, 3, 29, 1, 0),
        ),
        # Fall back (25 October 2026, 03:00 -> 02:00): 02:30 happens twice, runs once.
        (
            "30 2 * * *",
            "Europe/Paris",
            utc(2026, 10, 25, 0, 0),
            utc(2026, 10, 24, 0, 30),
            utc(2026, 10, 25, 0, 30),
        ),
        (
            "30 2 * * *",
            "Europe/Paris",
            utc(2026, 10, 25, 0, 31),
            utc(2026, 10, 25, 0, 30),
            utc(2026, 10, 26, 1, 30),
        ),
        # Day of month OR day of week when neither starts with *: the 1st, or any Monday.
        (
            "0 0 1 * 1",
            "UTC",
            utc(2026, 11, 25, 0, 0),
            utc(2026, 11, 23, 0, 0),
            utc(2026, 11, 30, 0, 0),
        ),
    ],
)
def test_the_latest_and_the_following_tick(text, zone, at, latest, following):
    expression = CronExpression(text, zone)
    assert expression.latest(at) == latest
    assert expression.following(at) == following
    assert expression.latest(at).tzinfo == UTC  # type: ignore[union-attr]


def test_a_tick_in_another_zone_is_the_same_moment():
    at = datetime.datetime(
        2026, 11, 25, 4, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    assert CronExpression("0 * * * *").latest(at) == utc(2026, 11, 25, 2, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "five fields"),
        ("* * * *", "five fields"),
        # Seconds: the scheduler wakes at most once a minute.
        ("0 * * * * *", "five fields"),
        ("61 * * * *", "Bad minute"),
        ("* 24 * * *", "Bad hour"),
        ("* * 32 * *", "Bad day-of-month"),
        ("* * * 13 *", "Bad month"),
        ("* * * * 8", "Bad day-of-week"),
        ("*/0 * * * *", "Bad minute"),
        ("@often", "five fields"),
        (5, "is a string"),
    ],
)
def test_an_invalid_expression_is_refused_with_the_reason(text, message):
    with pytest.raises(CronExpressionError, match=message):
        CronExpression(text)


def test_an_unknown_time_zone_is_refused():
    with pytest.raises(CronExpressionError, match="not a time zone name"):
        CronExpression("* * * * *", "Mars/Olympus_Mons")


def test_describe_says_when_in_english():
    assert CronExpression("*/5 * * * *").describe() == "Every fifth minute of every hour"


def test_task_refuses_a_bad_cron_expression_when_declared():
    def handler(payload):
        return None

    with pytest.raises(InvalidTaskError, match=r"cron: '\* \* \*' is not a cron expression"):
        Task(handler, cron="* * *")
    assert Task(handler, cron="*/5 * * * *").cron == "*/5 * * * *"


def test_a_task_declares_cron_before_django_is_set_up():
    # A project's models.py may declare tasks: the app registry is not ready then.
    code = (
        "import sys, django_outbox; "
        "t = django_outbox.Task(print, cron='@daily'); "
        "assert 'django_outbox.models' not in sys.modules, 'models imported'; "
        "print(t.cron)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "@daily"
