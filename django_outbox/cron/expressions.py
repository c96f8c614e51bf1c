"""Cron expressions: the ticks they name, in a time zone, by ``cronsim``.

What an expression may say (five fields, or a shorthand such as ``@daily``) is in
``validation.schedules``. Ticks are computed
in the entry's time zone and returned in UTC; daylight saving time follows Debian's cron
(``cronsim``): a tick in the skipped hour runs once at the jump, one in the repeated hour once.
"""

from __future__ import annotations

import datetime

from cronsim import CronSim, CronSimError

from ..validation.schedules import cron_fields
from ..validation.schedules import time_zone as zone_named

UTC = datetime.timezone.utc
ONE_SECOND = datetime.timedelta(seconds=1)


class CronExpressionError(ValueError):
    """The text is not a cron expression of five fields, or the time zone is unknown."""


def time_zone(name: str) -> datetime.tzinfo:
    """Return the zone named ``name`` ("UTC", "Europe/Paris"); raise CronExpressionError."""
    try:
        return zone_named(name)
    except ValueError as error:
        raise CronExpressionError(str(error)) from error


class CronExpression:
    """A parsed cron expression in a time zone: which minutes it names."""

    def __init__(self, text: str, zone: str = "UTC") -> None:
        try:
            self.fields = cron_fields(text)
        except ValueError as error:
            raise CronExpressionError(str(error)) from None
        self.text = text
        self.zone_name = zone
        self.zone = time_zone(zone)

    def __repr__(self) -> str:
        return f"<CronExpression {self.text!r} {self.zone_name}>"

    def describe(self) -> str:
        """Say in English when it runs ("Every fifth minute"), or repeat it if cronsim can't."""
        try:
            return str(CronSim(self.fields, datetime.datetime(2000, 1, 1, tzinfo=UTC)).explain())
        except Exception:
            return self.fields

    def latest(self, at: datetime.datetime) -> datetime.datetime | None:
        """Return the latest tick at or before ``at`` (aware), in UTC; None if there is none."""
        # cronsim iterates from a whole second, excluding it: start one second later.
        start = at.astimezone(self.zone).replace(microsecond=0) + ONE_SECOND
        return self._first(CronSim(self.fields, start, reverse=True))

    def following(self, at: datetime.datetime) -> datetime.datetime | None:
        """Return the first tick after ``at`` (aware), in UTC; None if there is none."""
        start = at.astimezone(self.zone).replace(microsecond=0)
        return self._first(CronSim(self.fields, start))

    @staticmethod
    def _first(ticks: CronSim) -> datetime.datetime | None:
        try:
            tick = next(ticks)
        except (StopIteration, CronSimError):
            # Past the years cronsim computes (a "30 2 29 2 *" far away, say).
            return None
        return tick.astimezone(UTC)
