"""Make this process's clock wrong by OUTBOX_TEST_CLOCK_SKEW_SECONDS (imported by settings).

Only Python's view of the time moves (``time.time`` and Django's ``timezone.now``): a worker on
a host whose clock is off. Leases and due times are the database's, so nothing may change.
"""

from __future__ import annotations

import datetime
import os
import time

from django.utils import timezone

SKEW = float(os.environ.get("OUTBOX_TEST_CLOCK_SKEW_SECONDS", "0"))
_real_time = time.time
_real_now = timezone.now


def _skewed_time() -> float:
    return _real_time() + SKEW


def _skewed_now() -> datetime.datetime:
    return _real_now() + datetime.timedelta(seconds=SKEW)


if SKEW:
    time.time = _skewed_time
    timezone.now = _skewed_now
