"""Testing helpers: run jobs in the test, assert what was enqueued or published, relay
messages in the test, simulate crashes.

Everything here runs in the caller's thread and transaction (a pytest-django ``db`` test or a
``TestCase``), one job at a time, deterministically. With pytest, the ``outbox`` fixture (from
the plugin ``django_outbox.pytest_plugin``) gives the same functions.
"""

from .assertions import ANY, assert_enqueued, assert_not_enqueued, enqueued_jobs
from .crashes import complete_late, crash_after_handler, take_over_while_running
from .messages import (
    assert_not_published,
    assert_published,
    clear_relayed_messages,
    drain_relay,
    published_messages,
    relayed_messages,
)
from .runs import RunLimitExceeded, consume, force_retry, run_jobs

__all__ = [
    "ANY",
    "RunLimitExceeded",
    "assert_enqueued",
    "assert_not_enqueued",
    "assert_not_published",
    "assert_published",
    "clear_relayed_messages",
    "complete_late",
    "consume",
    "crash_after_handler",
    "drain_relay",
    "enqueued_jobs",
    "force_retry",
    "published_messages",
    "relayed_messages",
    "run_jobs",
    "take_over_while_running",
]
