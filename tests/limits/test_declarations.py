"""Declaring limits: rates' text, @task's options, OUTBOX["QUEUES"], and the jobs' limit keys."""

import pytest
from django.test import override_settings

from django_outbox import EnqueueError, InvalidTaskError, Task
from django_outbox.limits.buckets import refilled, seconds_until_token
from django_outbox.validation.limits import Rate, parse_rate
from tests.testapp import tasks


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("10/s", 10, 1.0),
        ("600/m", 600, 60.0),
        ("1000/h", 1000, 3600.0),
        ("1/500ms", 1, 0.5),
        ("5/10s", 5, 10.0),
        (" 2 / 1.5 s ", 2, 1.5),
        ("100/d", 100, 86400.0),
    ],
)
def test_a_rate_is_starts_per_period(text, count, period):
    assert parse_rate(text) == Rate(count, period)


@pytest.mark.parametrize("text", ["10", "10/", "/s", "10/x", "0/s", "-1/s", "10/0s", "1/2d"])
def test_a_rate_that_says_nothing_clear_is_refused(text):
    with pytest.raises(ValueError, match=r"rate|count|period"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("tokens", "refilled_at", "now", "expected"),
    [
        (None, None, 100.0, 10.0),  # never used: full
        (0.0, 100.0, 100.0, 0.0),
        (0.0, 100.0, 100.05, 0.5),  # 10/s: a token every 0.1 s
        (2.0, 100.0, 200.0, 10.0),  # never above the bucket's size
        (3.0, 100.0, 99.0, 3.0),  # a clock that went back adds nothing
    ],
)
def test_a_bucket_refills_at_the_rate_up_to_its_size(tokens, refilled_at, now, expected):
    assert refilled(Rate(10, 1.0), tokens, refilled_at, now) == pytest.approx(expected)


def test_the_next_token_comes_after_the_missing_fraction_of_a_period():
    assert seconds_until_token(Rate(10, 1.0), 0.25) == pytest.approx(0.075)
    assert seconds_until_token(Rate(10, 1.0), 1.5) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": 0},
        {"concurrency": True},
        {"concurrency_per_key": 2.5},
        {"rate_limit": "fast"},
        {"rate_limit_per_key": 10},
    ],
)
def test_task_refuses_a_bad_limit(options):
    with pytest.raises(InvalidTaskError):
        Task(lambda payload: None, name="limited", **options)


@pytest.mark.django_db
def test_jobs_of_unlimited_tasks_have_no_limit_key():
    assert tasks.noop.enqueue({}).limit_key is None


@pytest.mark.django_db
def test_jobs_of_a_limited_task_have_a_key_even_an_empty_one():
    assert tasks.capped.enqueue({}).limit_key == ""
    assert tasks.capped.enqueue({}, fair_key="tenant").limit_key == "tenant"
    assert tasks.capped.enqueue({}, fair_key="tenant", limit_key="account").limit_key == "account"
    assert [job.limit_key for job in tasks.capped.enqueue_many([{}, {}], limit_key="b")] == [
        "b",
        "b",
    ]


@pytest.mark.django_db
def test_a_limit_key_makes_any_job_limited_so_that_a_pause_can_hold_it():
    assert tasks.noop.enqueue({}, limit_key="account").limit_key == "account"


@pytest.mark.django_db
@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 5}}})
def test_jobs_of_a_limited_queue_are_limited():
    assert tasks.noop.using(queue="crm").enqueue({}).limit_key == ""
    assert tasks.noop.enqueue({}).limit_key is None


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", 5, "x" * 256, "a\x00b"])
def test_a_bad_limit_key_is_refused_before_anything_is_written(key):
    with pytest.raises(EnqueueError, match="limit_key"):
        tasks.noop.enqueue({}, limit_key=key)
