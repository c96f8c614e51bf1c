"""What the management commands print, worded once."""

from __future__ import annotations


def job_count(count: int) -> str:
    """``count`` jobs, in words: "1 job", "1,234 jobs"."""
    return f"{count:,} job" if count == 1 else f"{count:,} jobs"
