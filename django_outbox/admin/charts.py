"""The dashboard's charts: server-rendered SVG, no script, nothing fetched from elsewhere.

The markup is built from numbers this module formats itself (``f"{x:.1f}"``: digits, a dot and
a sign) and constant text; the one caller-given text, the chart's label, is escaped. So a
queue name cannot inject markup, and a chart of 96 bars costs no template rendering.
"""

from __future__ import annotations

import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..stats.overview import Activity

WIDTH, HEIGHT = 300, 80
#: Room for the axis labels under the bars, and the scale's label above them.
BOTTOM, TOP = 14, 12
SUCCEEDED_COLOUR, RETRIED_COLOUR, FAILED_COLOUR = "#3d9a50", "#e0a030", "#d0393e"


def activity_chart(activity: Activity, *, label: str) -> SafeString:
    """Stacked bars, one per bucket: attempts that succeeded, failed to be retried, failed."""
    window = activity.window
    series = [
        (activity.succeeded, SUCCEEDED_COLOUR),
        (activity.retried, RETRIED_COLOUR),
        (activity.failed, FAILED_COLOUR),
    ]
    totals = [sum(values[index] for values, _ in series) for index in range(window.buckets)]
    peak = max(totals)
    plot_height = HEIGHT - BOTTOM - TOP
    slot = WIDTH / window.buckets
    width = max(slot - 1, 1.0)
    parts = []
    for index, total in enumerate(totals):
        if not total:
            continue
        x = index * slot
        base = float(HEIGHT - BOTTOM)
        start = activity.start + datetime.timedelta(seconds=index * window.bucket_seconds)
        counts = [int(values[index]) for values, _ in series]
        parts.append(
            f"<g><title>{start:%H:%M} UTC: {counts[0]} succeeded, {counts[1]} retried, "
            f"{counts[2]} failed</title>"
        )
        for count, (_, colour) in zip(counts, series, strict=True):
            if not count:
                continue
            height = max(count / peak * plot_height, 1.0)
            base -= height
            parts.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{width:.1f}" height="{height:.1f}" '
                f'fill="{colour}"/>'
            )
        parts.append("</g>")
    hour = window.seconds == 3600
    first, half = ("-60 min", "-30 min") if hour else ("-24 h", "-12 h")
    bucket = f"{window.bucket_seconds // 60} min"
    text_y, axis_y = HEIGHT - 2, HEIGHT - BOTTOM
    return mark_safe(
        f'<svg class="outbox-chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{escape(label)}">'
        f'<line x1="0" y1="{axis_y}" x2="{WIDTH}" y2="{axis_y}" stroke="#bbb"/>'
        f'<text x="0" y="{text_y}" class="axis">{first}</text>'
        f'<text x="{WIDTH / 2:.0f}" y="{text_y}" class="axis" text-anchor="middle">{half}</text>'
        f'<text x="{WIDTH}" y="{text_y}" class="axis" text-anchor="end">now</text>'
        f'<text x="0" y="9" class="axis">{peak:,} / {bucket}</text>' + "".join(parts) + "</svg>"
    )
