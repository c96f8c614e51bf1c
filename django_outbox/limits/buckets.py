"""A rate limit's token bucket: the arithmetic, apart from where its state is kept.

Why a token bucket: its state is two numbers per limit (tokens, when last refilled), read and
written in the claim's transaction with the limit's row locked, so every worker on every host
takes from one bucket and the count is exact; a burst is at most the bucket's size (the rate's
count), and over any stretch of time starts never exceed the rate by more than that one burst.
A sliding window would need every start's time within the window, and a fixed window allows
twice the rate across a window's edge.
"""

from __future__ import annotations

from ..validation.limits import Rate


def refilled(rate: Rate, tokens: float | None, refilled_at: float | None, now: float) -> float:
    """Return the tokens in ``rate``'s bucket at ``now`` (seconds), from ``tokens`` left at
    ``refilled_at``; a bucket never used is full. A clock that went back adds nothing."""
    if tokens is None or refilled_at is None:
        return float(rate.burst)
    gained = max(0.0, now - refilled_at) * rate.per_second
    return min(float(rate.burst), tokens + gained)


def seconds_until_token(rate: Rate, tokens: float) -> float:
    """Return how long until a bucket holding ``tokens`` holds one whole token."""
    return max(0.0, (1.0 - tokens) / rate.per_second)
