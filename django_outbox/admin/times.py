"""Times as the admin shows them: to the second, with how long ago (or how soon) in words.

An operator reads "failed 4 min ago" faster than a timestamp, and needs the timestamp to the
second to match it with a log line. Both are shown; the full date and time zone in the tooltip.
"""

from __future__ import annotations

import datetime

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext


def duration_text(seconds: float | None) -> str:
    """``42 s``, ``7 min``, ``3 h 5 min``, ``2 d 4 h``; an empty string for None."""
    if seconds is None:
        return ""
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h"


def relative_text(moment: datetime.datetime, now: datetime.datetime) -> str:
    """``4 min ago`` for a past moment, ``in 58 min`` for one to come."""
    seconds = (moment - now).total_seconds()
    if seconds > 0.5:
        return gettext("in %(delay)s") % {"delay": duration_text(seconds)}
    return gettext("%(age)s ago") % {"age": duration_text(-seconds)}


def clock_text(moment: datetime.datetime, now: datetime.datetime) -> str:
    """The time to the second in the current time zone; the date too unless it is today's."""
    local, today = timezone.localtime(moment), timezone.localtime(now)
    if local.date() == today.date():
        return f"{local:%H:%M:%S}"
    return f"{local:%Y-%m-%d %H:%M:%S}"


def full_text(moment: datetime.datetime) -> str:
    """``2026-11-27 14:03:27 UTC``: the date, the time to the second and the zone."""
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}"


def moment_html(
    moment: datetime.datetime | None, now: datetime.datetime, *, verb: str = ""
) -> SafeString:
    """``failed 4 min ago 14:03:27`` as a ``<time>``, the full date in its tooltip; ``-`` for
    None. ``verb`` ("failed", "runs") is put before the relative text."""
    if moment is None:
        return SafeString("-")
    relative = relative_text(moment, now)
    return format_html(
        '<time datetime="{}" title="{}">{}{}</time> <span class="outbox-clock">{}</span>',
        moment.isoformat(),
        full_text(moment),
        f"{verb} " if verb else "",
        relative,
        clock_text(moment, now),
    )
