"""What a job's log line costs the worker: ``log_job`` against the plain ``logger.info`` it
replaced, with the level on (formatted by a handler that drops the text) and off.

Run: ``.venv/bin/python bench/log_cost.py`` (no database, no Django settings needed).
"""

from __future__ import annotations

import logging
import time
import timeit
import uuid

from django_outbox.claimed import ClaimedJob
from django_outbox.worker.job_logs import log_job

LINES = 100_000


class Formatted(logging.Handler):
    """Format every record, as a real handler would, and write it nowhere."""

    def emit(self, record: logging.LogRecord) -> None:
        self.format(record)


def main() -> None:
    package = logging.getLogger("django_outbox")
    handler = Formatted()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    package.addHandler(handler)
    logger = logging.getLogger("django_outbox.worker.runner")
    job = ClaimedJob(
        id=1,
        task_name="shop.tasks.send_receipt",
        queue="default",
        stored_payload="{}",
        attempts=1,
        max_attempts=3,
        priority=0,
        lease_token=uuid.uuid4(),
        worker_id="host:1:abcdef",
    )
    job.handler_started = time.monotonic()

    def plain() -> None:
        logger.info("job succeeded job=%s task=%s attempt=%s", job.id, job.task_name, job.attempts)

    def structured() -> None:
        log_job(logger, logging.INFO, job, "succeeded")

    for level in (logging.INFO, logging.WARNING):
        package.setLevel(level)
        before = timeit.timeit(plain, number=LINES) / LINES * 1e6
        after = timeit.timeit(structured, number=LINES) / LINES * 1e6
        print(
            f"package level {logging.getLevelName(level)}: logger.info {before:.2f} us, "
            f"log_job {after:.2f} us per success line"
        )


if __name__ == "__main__":
    main()
