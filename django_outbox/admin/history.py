"""A job's history for its admin page: every attempt, and what operators did to it.

Failed attempts come from the job's ``errors`` (written by ``transitions.record_failure``); the
attempt that succeeded, runs now or was cancelled comes from the row itself; operators' actions
(retries, payload edits, cancels) from the admin's log (``LogEntry``), which the admin writes.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.formats import localize
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from ..models import Job, JobStatus
from .summary import first_line

#: The most operator actions a job's page lists (the newest).
ACTIONS_SHOWN = 50


@dataclass(frozen=True)
class Event:
    """One line of a job's history."""

    at: datetime.datetime | None
    what: str
    started_at: datetime.datetime | None = None
    worker: str = ""
    error: str = ""
    traceback: str = ""


def _when(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value
    if not isinstance(value, str):
        return None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, datetime.timezone.utc)
    return parsed


def attempts(job: Job) -> list[Event]:
    """Every attempt the job's row records, oldest first."""
    events = []
    cancelled_entries = 0
    recorded = job.errors if isinstance(job.errors, list) else []
    for entry in recorded:
        if not isinstance(entry, dict):
            continue
        if entry.get("event") == "cancelled":
            # A cancel requested while the attempt ran: the entry says what became of it.
            what = gettext("attempt %(attempt)s cancelled")
            cancelled_entries += 1
        else:
            what = gettext("attempt %(attempt)s failed")
        events.append(
            Event(
                at=_when(entry.get("at")),
                what=what % {"attempt": entry.get("attempt")},
                started_at=_when(entry.get("started_at")),
                worker=str(entry.get("worker") or ""),
                error=str(entry.get("error") or ""),
                traceback=str(entry.get("traceback") or ""),
            )
        )
    # The attempt that is not a failure: it ran to success, runs, or was cancelled running.
    outcome = {
        JobStatus.SUCCEEDED: gettext("attempt %(attempt)s succeeded"),
        JobStatus.RUNNING: gettext("attempt %(attempt)s running"),
        JobStatus.CANCELLED: gettext("attempt %(attempt)s cancelled"),
    }.get(job.status)  # type: ignore[call-overload]
    if job.status == JobStatus.CANCELLED and cancelled_entries:
        # The entry of the cancelled attempt is its line already.
        outcome = None
    if outcome is not None and job.started_at is not None:
        events.append(
            Event(
                at=job.finished_at,
                what=outcome % {"attempt": job.attempts},
                started_at=job.started_at,
                worker=job.worker_id,
            )
        )
    return events


def operator_actions(job: Job) -> list[Event]:
    """What operators did to the job through the admin, oldest first."""
    content_type = ContentType.objects.get_for_model(Job)
    entries = (
        LogEntry.objects.filter(content_type=content_type, object_id=str(job.pk))
        .select_related("user")
        .order_by("-action_time")[:ACTIONS_SHOWN]
    )
    return [
        Event(at=entry.action_time, what=entry.get_change_message(), worker=str(entry.user))
        for entry in reversed(entries)
    ]


def _sort_key(event: Event) -> datetime.datetime:
    moment = event.at or event.started_at
    # A running attempt has not ended: it goes last.
    return moment or datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


#: Where an operator's payload edit names the payload it replaced (job_views.edit_payload_view).
PAYLOAD_BEFORE = " The payload before: "


def history(job: Job, *, details: bool = True) -> list[Event]:
    """Attempts and operators' actions together, oldest first.

    Without ``details`` (a user without the payload permission), each error is its first line,
    with no traceback, and operators' actions do not name the payloads they replaced.
    """
    events = sorted([*attempts(job), *operator_actions(job)], key=_sort_key)
    if details:
        return events
    return [
        replace(
            event,
            what=event.what.partition(PAYLOAD_BEFORE)[0],
            error=first_line(event.error),
            traceback="",
        )
        for event in events
    ]


def _duration(event: Event) -> str:
    if event.started_at is None or event.at is None:
        return ""
    seconds = max((event.at - event.started_at).total_seconds(), 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def render(events: list[Event]) -> SafeString:
    """The history as a table; every value escaped."""
    if not events:
        return SafeString("-")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                localize(event.at) if event.at else "-",
                event.what,
                localize(event.started_at) if event.started_at else "",
                _duration(event),
                event.worker,
                format_html(
                    "<details><summary>{}</summary><pre>{}</pre></details>",
                    event.error,
                    event.traceback,
                )
                if event.traceback
                else event.error,
            )
            for event in events
        ),
    )
    return format_html(
        '<table class="outbox-history"><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th>'
        "<th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>",
        gettext("when"),
        gettext("what"),
        gettext("started"),
        gettext("took"),
        gettext("worker or user"),
        gettext("error"),
        rows,
    )


def forget_pruned_jobs(sender: Any, job_ids: list[int], **kwargs: Any) -> None:
    """Delete the admin log's entries of jobs the retention pruner deleted (``jobs_pruned``):
    the log would otherwise outgrow the jobs it is about, and keep their payloads."""
    LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Job),
        object_id__in=[str(job_id) for job_id in job_ids],
    ).delete()
