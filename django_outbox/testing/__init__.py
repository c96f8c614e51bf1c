"""Testing helpers: run jobs in the test, assert what was enqueued, simulate crashes.

Everything here runs in the caller's thread and transaction (a pytest-django ``db`` test or a
``TestCase``), one job at a time, deterministically. With pytest, the ``outbox`` fixture (from
the plugin ``django_outbox.pytest_plugin``) gives the same functions.
"""

from .assertions import ANY, assert_enqueued, assert_not_enqueued, enqueued_jobs
from .crashes import complete_late, crash_after_handler, take_over_while_running
from .runs import RunLimitExceeded, consume, force_retry, run_jobs

__all__ = [
    "ANY",
    "RunLimitExceeded",
    "assert_enqueued",
    "assert_not_enqueued",
    "complete_late",
    "consume",
    "crash_after_handler",
    "enqueued_jobs",
    "force_retry",
    "run_jobs",
    "take_over_while_running",
]
