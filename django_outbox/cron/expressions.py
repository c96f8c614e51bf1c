"""Cron expressions: parsing and the ticks they name, in a time zone, by ``cronsim``.

Five fields (minute, hour, day of month, month, day of week) as Debian's cron reads them, or
one of the usual shorthands (``@hourly``, ``@daily``...). A sixth field (seconds), which
``cronsim`` accepts, is refused: the scheduler wakes at most once a minute. Ticks are computed
in the entry's time zone and returned in UTC; daylight saving time follows Debian's cron
(``cronsim``): a tick in the skipped hour runs once at the jump, one in the repeated hour once.
"""

from __future__ import annotations

import datetime
import functools
import zoneinfo

from cronsim import CronSim, CronSimError

UTC = datetime.timezone.utc
ONE_SECOND = datetime.timedelta(seconds=1)

#: The shorthands Vixie and Debian cron read, as five fields.
SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class CronExpressionError(ValueError):
    """The text is not a cron expression of five fields, or the time zone is unknown."""


@functools.lru_cache(maxsize=256)
def time_zone(name: str) -> datetime.tzinfo:
    """Return the zone named ``name`` ("UTC", "Europe/Paris"); raise CronExpressionError."""
    if name == "UTC":
        return UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError) as error:
        raise CronExpressionError(
            f"{name!r} is not a time zone name this system knows (an IANA name such as "
            "'UTC' or 'Europe/Paris')."
        ) from error


class CronExpression:
    """A parsed cron expression in a time zone: which minutes it names."""

    def __init__(self, text: str, zone: str = "UTC") -> None:
        if not isinstance(text, str):
            raise CronExpressionError(f"A cron expression is a string, not {type(text).__name__}.")
        self.text = text
        self.zone_name = zone
        self.zone = time_zone(zone)
        self.fields = SHORTHANDS.get(text.strip().lower(), text.strip())
        if len(self.fields.split()) != 5:
            raise CronExpressionError(
                f"{text!r} is not a cron expression: it needs five fields (minute hour "
                "day-of-month month day-of-week, e.g. '*/5 * * * *') or a shorthand such as "
                "'@daily'."
            )
        try:
            CronSim(self.fields, datetime.datetime(2000, 1, 1, tzinfo=UTC))
        except CronSimError as error:
            raise CronExpressionError(
                f"{text!r} is not a valid cron expression: {error}."
            ) from None

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
