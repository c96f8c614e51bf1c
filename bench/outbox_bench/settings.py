"""Settings for ``make bench``: the example project's, with the bench app installed.

Run from ``example_project/`` with ``bench/`` on the path::

    PYTHONPATH=../bench DJANGO_SETTINGS_MODULE=outbox_bench.settings python manage.py outbox_bench
"""

import os

from example.settings import *  # noqa: F403
from example.settings import INSTALLED_APPS, OUTBOX

# No relay thread in the bench's workers: the jobs' figures measure jobs alone (the relay has a
# bench of its own, outbox_relay_bench, which names its brokers).
OUTBOX = {**OUTBOX, "BROKERS": {}}

INSTALLED_APPS = [*INSTALLED_APPS, "outbox_bench"]

# bench/limits.py kills workers: a short lease lets their places and jobs come back soon.
if os.environ.get("OUTBOX_BENCH_LEASE_SECONDS"):
    _lease = float(os.environ["OUTBOX_BENCH_LEASE_SECONDS"])
    OUTBOX = {**OUTBOX, "LEASE_SECONDS": _lease, "HEARTBEAT_SECONDS": _lease / 4}
