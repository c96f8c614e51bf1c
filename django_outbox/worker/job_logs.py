"""Log lines about jobs: readable ``key=value`` text, and the same facts as fields.

Every line about one job (claimed, succeeded, retrying, failed, snoozed, halted, cancelled,
lease lost, timed out, stuck) goes through ``log_job``: its text is the event and then
``job=... task=... queue=... attempt=... duration_ms=... worker=...``, and the record carries
those as attributes (``extra``) for a JSON formatter or a filter: ``record.job``,
``record.task``, ``record.queue``, ``record.attempt``, ``record.duration_ms``, ``record.worker``
and ``record.event``. None of these names is a ``LogRecord`` attribute (``extra`` may not
overwrite those). docs/logging.md shows how to route and format them.

The cost when the level is off is one ``isEnabledFor`` call (cached by the logging module):
no dict is built and nothing is formatted. When it is on, one small dict per line; the text is
formatted only if a handler emits it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..claimed import ClaimedJob

#: The structured fields of every line about a job, in the order its text gives them.
JOB_FIELDS = ("job", "task", "queue", "attempt", "duration_ms", "worker")

_JOB_TEXT = " job=%s task=%s queue=%s attempt=%s duration_ms=%s worker=%s"


def job_fields(job: ClaimedJob, event: str) -> dict[str, Any]:
    """Return the ``extra`` of a line about ``job``: JOB_FIELDS and ``event``.

    ``duration_ms``: milliseconds since the handler started (to the outcome being recorded,
    for an outcome line), or None before it started.
    """
    started = job.handler_started
    return {
        "event": event,
        "job": job.id,
        "task": job.task_name,
        "queue": job.queue,
        "attempt": job.attempts,
        "duration_ms": None if started is None else round((time.monotonic() - started) * 1000, 1),
        "worker": job.worker_id,
    }


def log_job(
    logger: logging.Logger,
    level: int,
    job: ClaimedJob,
    event: str,
    details: str = "",
    *args: Any,
    exc_info: Any = None,
    stacklevel: int = 2,
) -> None:
    """Log ``job <event> job=... worker=... <details % args>`` at ``level``, with the fields.

    ``event``: a few words, also the ``event`` field ("succeeded", "will retry"). ``details``:
    %-style text after the job's fields, formatted with ``args`` only if the line is emitted.
    ``stacklevel``: the record names the function that many frames up (2: the caller's).
    """
    if not logger.isEnabledFor(level):
        return
    fields = job_fields(job, event)
    message = f"job {event}{_JOB_TEXT}" + (f" {details}" if details else "")
    logger.log(
        level,
        message,
        *(fields[name] for name in JOB_FIELDS),
        *args,
        extra=fields,
        exc_info=exc_info,
        # The caller's function and line, not this helper's.
        stacklevel=stacklevel,
    )
