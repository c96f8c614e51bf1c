"""The backoff formula, and how a task's retry_strategy overrides it."""

import datetime
import random

import pytest

from django_outbox import GIVE_UP, RetryPolicy
from django_outbox.retry import decision_delay

NO_JITTER = RetryPolicy(base_delay=1, factor=2, max_delay=3600, jitter=0)


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [(1, 1), (2, 2), (3, 4), (4, 8), (12, 2048), (13, 3600), (100, 3600), (10_000, 3600)],
)
def test_delay_doubles_from_the_base_up_to_the_cap(attempt, delay):
    assert NO_JITTER.delay(attempt) == delay


def test_jitter_spreads_delays_within_its_fraction_and_never_past_the_cap():
    policy = RetryPolicy(base_delay=10, factor=2, max_delay=25, jitter=0.5)
    rng = random.Random(7)
    first = [policy.delay(1, rng) for _ in range(200)]
    assert min(first) >= 5
    assert max(first) <= 15
    assert len(set(first)) > 100
    assert max(policy.delay(5, rng) for _ in range(200)) <= 25


@pytest.mark.parametrize(
    "options",
    [
        {"base_delay": -1},
        {"max_delay": -1},
        {"factor": 0.5},
        {"jitter": 2},
        {"base_delay": float("inf")},
        {"max_delay": float("nan")},
        {"max_delay": 1e15},
        {"factor": float("inf")},
    ],
)
def test_invalid_policies_are_refused(options):
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**options)


def test_policy_from_the_setting():
    policy = RetryPolicy.from_setting({"BASE_DELAY": 3, "FACTOR": 3, "MAX_DELAY": 60, "JITTER": 0})
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [3, 9, 27, 60]


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (None, None),
        (GIVE_UP, "give_up"),
        (datetime.timedelta(minutes=2), 120.0),
        (30, 30.0),
        (0.5, 0.5),
    ],
)
def test_strategy_decisions(decision, expected):
    assert decision_delay(decision, "strategy") == expected


@pytest.mark.parametrize("decision", ["soon", True, [1]])
def test_strategy_decisions_of_the_wrong_type_are_refused(decision):
    with pytest.raises(TypeError, match="return a timedelta"):
        decision_delay(decision, "strategy")


@pytest.mark.parametrize("decision", [-1, float("nan"), float("inf")])
def test_negative_or_non_finite_strategy_delays_are_refused(decision):
    with pytest.raises(ValueError, match="a delay is a finite number >= 0"):
        decision_delay(decision, "strategy")


def test_strategy_delays_beyond_the_longest_retry_delay_are_capped():
    """1e15 s is past any datetime a database stores: the job would be left running."""
    assert decision_delay(1e15, "strategy") == 30 * 86400
    assert decision_delay(datetime.timedelta.max, "strategy") == 30 * 86400
