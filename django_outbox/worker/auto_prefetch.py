"""``PREFETCH = "auto"``: claim ahead only while the jobs a worker runs are short.

Claiming ahead pays for short jobs: a thread that finishes one takes the next at once instead of
waiting for a claim's round trip. For long jobs it costs: jobs claimed ahead wait in this worker,
leased, while other workers may be idle. So the worker keeps a moving average of how long its
handlers run and claims up to ``concurrency`` jobs ahead while it is short, none otherwise.
"""

from __future__ import annotations

#: An average handler duration below which a worker claims ahead. A claim's round trip is a
#: millisecond or a few; a handler of 0.1 s or more waits for it for a few percent of its time at
#: most, so claiming ahead gains little, and the jobs it would hold could run in another worker.
SHORT_JOB_SECONDS = 0.1
#: Attempts finished before the average is trusted: until then the worker claims no more than
#: its free threads, so that a worker of long jobs never holds more than it runs.
WARM_UP_ATTEMPTS = 4
#: The weight of the newest duration in the average (an exponentially weighted one: constant
#: time and memory, and it follows a change of workload within a few dozen jobs).
SMOOTHING = 0.1


class AdaptivePrefetch:
    """The prefetch that the durations of the last attempts call for (not thread-safe: the
    worker calls it under its held jobs' lock)."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.attempts = 0
        self.average_seconds = 0.0

    def record(self, seconds: float) -> int:
        """Add one attempt's handler duration; return the prefetch to use now."""
        self.attempts += 1
        if self.attempts == 1:
            self.average_seconds = seconds
        else:
            self.average_seconds += SMOOTHING * (seconds - self.average_seconds)
        return self.prefetch()

    def prefetch(self) -> int:
        if self.attempts < WARM_UP_ATTEMPTS or self.average_seconds >= SHORT_JOB_SECONDS:
            return 0
        return self.concurrency
