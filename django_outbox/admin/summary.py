"""What a job's state comes to, in words: the list's "when" column and the job page's summary
line ("Failed · attempt 3 of 3 · worker w1 · failed 4 min ago").
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext

from ..models import Job, JobStatus
from . import times


def first_line(text: str) -> str:
    """The first line of an error that is not blank."""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def when_html(job: Job, now: datetime.datetime) -> SafeString:
    """The job's last or next event, and when: "failed 4 min ago 14:03:27", "runs in 58 min",
    "due 3 s ago", "started 12 s ago"."""
    status = job.status
    if status in (JobStatus.READY, JobStatus.RETRYING):
        if job.run_at is None:
            return SafeString("-")
        verb = gettext("runs") if job.run_at > now else gettext("due")
        return times.moment_html(job.run_at, now, verb=verb)
    if status == JobStatus.RUNNING:
        return times.moment_html(job.started_at, now, verb=gettext("started"))
    if status == JobStatus.HALTED:
        return SafeString(gettext("waits to be resumed"))
    verbs = {
        JobStatus.SUCCEEDED: gettext("succeeded"),
        JobStatus.FAILED: gettext("failed"),
        JobStatus.CANCELLED: gettext("cancelled"),
    }
    return times.moment_html(job.finished_at, now, verb=verbs.get(status, ""))  # type: ignore[call-overload]


def _plural(count: int, singular: str, plural: str) -> str:
    return (singular if count == 1 else plural) % {"count": count}


def failures_before(job: Job) -> int:
    """Failed attempts the job's row records before its current one."""
    recorded = job.errors if isinstance(job.errors, list) else []
    return sum(1 for entry in recorded if isinstance(entry, dict))


def summary_parts(job: Job, now: datetime.datetime) -> list[str | SafeString]:
    """The summary line's parts after the status: attempts, worker, what happened when."""
    if job.attempts:
        attempts = gettext("attempt %(attempt)d of %(max)d")
    else:
        attempts = gettext("not run yet, %(max)d attempts allowed")
    parts: list[str | SafeString] = [attempts % {"attempt": job.attempts, "max": job.max_attempts}]
    if job.worker_id:
        parts.append(gettext("worker %(worker)s") % {"worker": job.worker_id})
    if job.status == JobStatus.SUCCEEDED:
        failures = failures_before(job)
        if failures:
            parts.append(
                _plural(
                    failures,
                    gettext("succeeded after %(count)d failure"),
                    gettext("succeeded after %(count)d failures"),
                )
            )
    if job.status == JobStatus.HALTED and job.halt_reason:
        parts.append(gettext("halted: %(reason)s") % {"reason": first_line(job.halt_reason)})
    parts.append(when_html(job, now))
    return parts


def summary_html(job: Job, now: datetime.datetime, status_badge: SafeString) -> SafeString:
    """The summary line: the status badge, then its parts, separated by dots."""
    parts = summary_parts(job, now)
    joined = format_html_join(" · ", "<span>{}</span>", ((part,) for part in parts))
    return format_html('<p class="outbox-summary">{} {}</p>', status_badge, joined)


#: An error longer than this (lines or characters) is folded below its first line.
FOLD_LINES, FOLD_CHARACTERS = 8, 800
#: The most of an error's first line shown above the fold.
FIRST_LINE_LENGTH = 300


@dataclass(frozen=True)
class ShownError:
    """The error a job's page shows first: the current one, or a past one labelled so."""

    #: "Error" for a job that failed or will retry; "Past error" for one that went on since.
    label: str
    first_line: str
    #: The whole error (None without the payload permission); ``folded``: it is long.
    whole: str | None
    folded: bool
    traceback: str | None
    line_count: int
    traceback_line_count: int
    past: bool


def shown_error(job: Job, *, may_read_details: bool) -> ShownError | None:
    """The job's last error as its page shows it; None if it has none.

    A job that failed or is retrying shows its error as the current one. A job that went on
    since (it succeeded, was retried by hand, runs again) shows it as past, with its attempt:
    an operator must not read an old error as today's.
    """
    error = (job.last_error or "").strip()
    if not error:
        return None
    recorded = [entry for entry in (job.errors or []) if isinstance(entry, dict)]
    attempt = recorded[-1].get("attempt") if recorded else None
    past = job.status not in (JobStatus.FAILED, JobStatus.RETRYING)
    if past:
        label = (
            gettext("Past error, of attempt %(attempt)s") % {"attempt": attempt}
            if attempt
            else gettext("Past error")
        )
    else:
        label = (
            gettext("Error of attempt %(attempt)s") % {"attempt": attempt}
            if attempt
            else gettext("Error")
        )
    lines = error.splitlines()
    folded = len(lines) > FOLD_LINES or len(error) > FOLD_CHARACTERS
    traceback = (job.last_traceback or "").strip() if may_read_details else ""
    return ShownError(
        label=label,
        first_line=Truncator(first_line(error)).chars(FIRST_LINE_LENGTH),
        whole=error if may_read_details and (len(lines) > 1 or folded) else None,
        folded=folded,
        traceback=traceback or None,
        line_count=len(lines),
        traceback_line_count=len(traceback.splitlines()),
        past=past,
    )
