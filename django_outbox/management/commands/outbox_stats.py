"""``manage.py outbox_stats``: jobs by queue and status, recent run times and retries, and each
concurrency cap's and rate limit's use."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...limits.usage import limit_usage
from ...models import JobStatus
from ...stats.figures import processing_time_stats, queue_stats, retry_stats
from ..arguments import duration_argument


class Command(BaseCommand):
    help = (
        "Show jobs by queue and status, how long recent jobs ran, how many retried, and the use "
        "of each concurrency cap and rate limit."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--age",
            type=duration_argument,
            default=3600.0,
            help="The window of the run time and retry figures (default 1h): 90, 15m, 1h, 7d, 2w.",
        )
        parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
        parser.add_argument(
            "--exact",
            action="store_true",
            help="Count every job instead of estimating from a sample past 10,000 jobs (slow "
            "on a large table).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        age = options["age"]
        exact = options["exact"]
        queues = queue_stats(exact=exact)
        figures = {
            "queues": queues,
            # The statuses whose counts above are estimates (see docs/api.md).
            "estimated_statuses": sorted(queues.estimated),
            "processing_time": processing_time_stats(age=age, exact=exact),
            "retries": retry_stats(age=age, exact=exact),
            "age_seconds": age,
            "limits": [use.as_dict() for use in limit_usage()],
        }
        if options["json"]:
            self.stdout.write(json.dumps(figures, indent=2))
            return
        self.stdout.write(_table(figures))


def _table(figures: dict[str, Any]) -> str:
    statuses = JobStatus.values
    width = max([5, *(len(queue) for queue in figures["queues"])])
    lines = [f"{'queue':<{width}} " + " ".join(f"{status:>9}" for status in statuses)]
    estimated = set(figures["estimated_statuses"])
    for queue, counts in figures["queues"].items():
        lines.append(
            f"{queue:<{width}} "
            + " ".join(f"{_about(counts[s], s in estimated):>9}" for s in statuses)
        )
    if not figures["queues"]:
        lines.append("(no jobs)")
    if estimated:
        lines.append("~: estimated from a sample (--exact counts every job)")
    times = figures["processing_time"]
    lines.append("")
    lines.append(
        f"Succeeded in the last {figures['age_seconds']:g} s: "
        f"{_about(times['count'], times['estimated'])} jobs"
        + (f" (run times of a sample of {times['sample']:,})" if times["estimated"] else "")
    )
    if times["sample"]:
        lines.append(
            "run time (s): "
            + ", ".join(
                f"{name} {times[name]:.3f}"
                for name in ("avg", "min", "p50", "p90", "p95", "p99", "max")
            )
        )
    for queue, retries in figures["retries"].items():
        lines.append(
            f"{queue}: {_about(retries['finished'], retries['estimated'])} finished, "
            f"{_about(retries['ok'], retries['estimated'])} at the first attempt, "
            f"{_about(retries['retried'], retries['estimated'])} retried "
            f"({retries['retry_percent']:g}%)"
        )
    if figures["limits"]:
        lines.append("")
        lines.append("Limits (running/cap, tokens left, pauses, due jobs waiting):")
        lines += [f"  {_limit_text(use)}" for use in figures["limits"]]
    return "\n".join(lines)


def _limit_text(use: dict[str, Any]) -> str:
    parts = [f"{use['kind']} {use['name']}" + (f" key {use['key']}" if use["key"] else "")]
    if use["concurrency"] is not None:
        parts.append(f"running {use['running']}/{use['concurrency']}")
    if use["rate_limit"] is not None:
        parts.append(f"rate {use['rate_limit']} ({use['tokens']:.1f} tokens)")
    if use["paused_seconds"]:
        parts.append(f"paused {use['paused_seconds']:.0f} s")
    parts.append(f"waiting {use['waiting']}")
    return ", ".join(parts)


def _about(count: int, estimated: bool) -> str:
    return f"~{count:,}" if estimated else f"{count:,}"
