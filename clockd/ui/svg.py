"""Small server-side SVG charts for the health page (no JavaScript, no chart library).

Charts are plain functions from numbers to an SVG string; every text node is
escaped. Each chart carries a ``<title>`` and ``role="img"`` with an
``aria-label`` so screen readers announce what it shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from clockd.store import LagHistogram

WIDTH = 640
HEIGHT = 220
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 56, 16, 16, 40
# Colours chosen for contrast on white (WCAG AA for the legend text) and for
# telling the three lines apart without colour alone (dash patterns differ).
_SERIES_STYLE = {
    "p50": ("#1b5e20", ""),
    "p95": ("#8a4b00", "6 3"),
    "p99": ("#b71c1c", "2 3"),
}


@dataclass(frozen=True, slots=True)
class LagPoint:
    """Lag percentiles (seconds) of the runs due in one bucket; None where nothing was due."""

    label: str  # x-axis label, e.g. "20:15"
    p50: float | None
    p95: float | None
    p99: float | None


def _nice_ceiling(value: float) -> float:
    """A round axis maximum ≥ value (1, 2, 5 × 10^k), at least 1 s."""
    if value <= 1:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 < value:
        magnitude *= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return float(step * magnitude)
    return float(10 * magnitude)  # pragma: no cover - the loop always returns


def _seconds(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}s"
    if value >= 10:
        return f"{value:.1f}s"
    return f"{value:.2f}s"


def lag_plot(points: Sequence[LagPoint], title: str) -> str:
    """Three lines (p50, p95, p99) over the buckets; gaps where a bucket had no runs."""
    plot_w = WIDTH - _PAD_LEFT - _PAD_RIGHT
    plot_h = HEIGHT - _PAD_TOP - _PAD_BOTTOM
    values = [v for p in points for v in (p.p50, p.p95, p.p99) if v is not None]
    top = _nice_ceiling(max(values, default=1.0))
    n = max(len(points), 1)

    def x(i: int) -> float:
        return _PAD_LEFT + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return _PAD_TOP + plot_h * (1 - min(v, top) / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
        f'<rect x="{_PAD_LEFT}" y="{_PAD_TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#666"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        value = top * fraction
        parts.append(
            f'<text x="{_PAD_LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="12">'
            f"{escape(_seconds(value))}</text>"
        )
        if 0 < fraction < 1:
            parts.append(
                f'<line x1="{_PAD_LEFT}" x2="{_PAD_LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                'stroke="#ccc"/>'
            )
    step = max(1, n // 6)
    for i, point in enumerate(points):
        if i % step == 0:
            parts.append(
                f'<text x="{x(i):.1f}" y="{HEIGHT - _PAD_BOTTOM + 16}" text-anchor="middle" font-size="12">'
                f"{escape(point.label)}</text>"
            )
    for key, (colour, dash) in _SERIES_STYLE.items():
        segments: list[list[str]] = [[]]
        for i, point in enumerate(points):
            value = getattr(point, key)
            if value is None:
                if segments[-1]:
                    segments.append([])
                continue
            segments[-1].append(f"{x(i):.1f},{y(value):.1f}")
        for segment in segments:
            if len(segment) == 1:
                cx, cy = segment[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
            elif segment:
                dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
                parts.append(
                    f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash_attr} '
                    f'points="{" ".join(segment)}"/>'
                )
    legend_y = HEIGHT - 8
    for index, (key, (colour, dash)) in enumerate(_SERIES_STYLE.items()):
        lx = _PAD_LEFT + index * 90
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{lx}" x2="{lx + 24}" y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/><text x="{lx + 30}" y="{legend_y}" font-size="12">{key}</text>'
        )
    if not values:
        parts.append(
            f'<text x="{_PAD_LEFT + plot_w / 2}" y="{_PAD_TOP + plot_h / 2}" text-anchor="middle" '
            'font-size="14">no runs were due in this hour</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def histogram(hist: LagHistogram, title: str) -> str:
    """Bars: how many runs started after each lag (seconds), one per bin of ``hist``
    (counted by the store: ``Store.start_lag_histogram``)."""
    plot_w = WIDTH - _PAD_LEFT - _PAD_RIGHT
    plot_h = HEIGHT - _PAD_TOP - _PAD_BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
        f'<rect x="{_PAD_LEFT}" y="{_PAD_TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#666"/>',
    ]
    if not hist.count:
        parts.append(
            f'<text x="{_PAD_LEFT + plot_w / 2}" y="{_PAD_TOP + plot_h / 2}" text-anchor="middle" '
            'font-size="14">no top-of-hour runs yet</text></svg>'
        )
        return "".join(parts)
    low, width, counts = hist.low, hist.width, hist.counts
    bins = len(counts)
    most = max(counts)
    bar_w = plot_w / bins
    for i, count in enumerate(counts):
        h = plot_h * count / most
        parts.append(
            f'<rect x="{_PAD_LEFT + i * bar_w + 1:.1f}" y="{_PAD_TOP + plot_h - h:.1f}" '
            f'width="{bar_w - 2:.1f}" height="{h:.1f}" fill="#0d47a1"><title>{count} runs started '
            f"{escape(_seconds(low + i * width))}–{escape(_seconds(low + (i + 1) * width))} late</title></rect>"
        )
    for i in (0, bins // 2, bins):
        parts.append(
            f'<text x="{_PAD_LEFT + i * bar_w:.1f}" y="{HEIGHT - _PAD_BOTTOM + 16}" text-anchor="middle" '
            f'font-size="12">{escape(_seconds(low + i * width))}</text>'
        )
    parts.append(
        f'<text x="{_PAD_LEFT - 6}" y="{_PAD_TOP + 12}" text-anchor="end" font-size="12">{most}</text>'
        f'<text x="{_PAD_LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle" font-size="12">'
        "start lag (runs per bin)</text></svg>"
    )
    return "".join(parts)
