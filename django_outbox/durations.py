"""Durations as typed on a command line: ``90``, ``90s``, ``15m``, ``1h``, ``7d``, ``2w``."""

from __future__ import annotations

import math

#: Seconds per unit; a number without a unit is seconds.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest duration accepted: ten years (a typo such as 70000d is refused, not obeyed).
LONGEST = 3650 * 86400


def parse_duration(text: str) -> float:
    """Return the seconds ``text`` names; raise ValueError, saying what is accepted, if none."""
    cleaned = text.strip().lower()
    number, unit = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in UNITS else (cleaned, "s")
    try:
        seconds = float(number) * UNITS[unit]
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration such as 90, 90s, 15m, 1h, 7d or 2w."
        ) from None
    if not math.isfinite(seconds) or not 0 < seconds <= LONGEST:
        raise ValueError(f"{text!r} must be more than 0 and at most 3650 days.")
    return seconds
