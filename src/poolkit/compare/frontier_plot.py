"""The report's frontier plots (:func:`frontier_svg`): quality against a cost on a log axis,
as inline SVG; each row a dot with its interval, the frontier's rows joined and labelled,
every dot a link to its row's commands (``#row-N``).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from poolkit.compare.axes import linear_ticks, log_ticks

__all__ = ["Point", "frontier_svg"]


@dataclass(frozen=True)
class Point:
    """One row on a chart: ``rank`` (its place in the table, 1 first; the page's anchor
    ``#row-RANK``), ``place`` (its ``#`` cell: ``3=`` for a tie), ``label``, ``cost`` (> 0), ``quality``
    and its interval ``low``/``high`` (equal to it without intervals), ``frontier``: on
    this chart's frontier; ``intended``: the ``*`` row."""

    rank: int
    place: str
    label: str
    cost: float
    quality: float
    low: float
    high: float
    frontier: bool
    intended: bool = False


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def frontier_svg(points: Sequence[Point], chart_id: str, cost_name: str, metric: str) -> str:
    """One chart: ``metric`` (fraction) against ``cost_name`` on a log axis; ``chart_id``
    is the ``<svg>``'s id. ``points`` must not be empty."""
    width, height = 1120, 440
    left, right, top, bottom = 70, 230, 16, 56
    plot_w, plot_h = width - left - right, height - top - bottom
    costs = [max(p.cost, 1e-12) for p in points]
    lo_c, hi_c = min(costs), max(costs)
    lo_c, hi_c = lo_c / 1.6, hi_c * 1.6  # room around the extreme dots
    lo_q = min(min(p.low for p in points), min(p.quality for p in points))
    hi_q = max(max(p.high for p in points), max(p.quality for p in points))
    pad = max(0.05 * (hi_q - lo_q), 0.005)
    ticks_y = linear_ticks(lo_q - pad, hi_q + pad)
    lo_q, hi_q = min(lo_q - pad, ticks_y[0]), max(hi_q + pad, ticks_y[-1])

    def x(v: float) -> float:
        span = math.log10(hi_c) - math.log10(lo_c)
        return left + (math.log10(max(v, 1e-12)) - math.log10(lo_c)) / span * plot_w

    def y(v: float) -> float:
        return top + (hi_q - v) / (hi_q - lo_q) * plot_h

    base = top + plot_h
    parts = [
        f'<svg id="{_e(chart_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
        f'{height}" width="{width}" height="{height}" role="img" aria-label="{_e(metric)} '
        f'against {_e(cost_name)}" font-family="system-ui, sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for t in ticks_y:
        parts.append(
            f'<line x1="{left}" y1="{y(t):.1f}" x2="{left + plot_w}" y2="{y(t):.1f}" '
            f'stroke="#e5e7eb"/><text x="{left - 8}" y="{y(t) + 4:.1f}" text-anchor="end" '
            f'fill="#59636e">{t:g}</text>'
        )
    for t in log_ticks(lo_c, hi_c):
        parts.append(
            f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{base}" stroke="#e5e7eb"/>'
            f'<text x="{x(t):.1f}" y="{base + 16}" text-anchor="middle" fill="#59636e">'
            f"{t:g}</text>"
        )
    parts.append(
        f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#8c959f"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#8c959f"/>'
        f'<text x="{left + plot_w / 2:.1f}" y="{base + 40}" text-anchor="middle" '
        f'fill="#1f2328">{_e(cost_name)} (log scale)</text>'
        f'<text x="16" y="{top + plot_h / 2:.1f}" text-anchor="middle" fill="#1f2328" '
        f'transform="rotate(-90 16 {top + plot_h / 2:.1f})">{_e(metric)} (fraction)</text>'
    )
    front = sorted((p for p in points if p.frontier), key=lambda p: (p.cost, p.quality))
    if len(front) > 1:
        path = " ".join(f"{x(p.cost):.1f},{y(p.quality):.1f}" for p in front)
        parts.append(f'<polyline class="frontier-line" points="{path}" fill="none" '
                     'stroke="#7c3aed" stroke-width="2"/>')  # fmt: skip
    for p in points:
        color = "#c2410c" if p.intended else "#7c3aed" if p.frontier else "#0f766e"
        px, py = x(p.cost), y(p.quality)
        tip = f"#{p.place} {p.label}: {p.quality:.4f} [{p.low:.4f}, {p.high:.4f}], {p.cost:g}"
        parts.append(
            f'<a href="#row-{p.rank}"><g class="point{" frontier" if p.frontier else ""}" '
            f'data-rank="{p.rank}"><title>{_e(tip)}</title>'
            f'<line x1="{px:.1f}" y1="{y(p.low):.1f}" x2="{px:.1f}" y2="{y(p.high):.1f}" '
            f'stroke="{color}" stroke-width="1.5"/>'
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{6 if p.frontier else 4.5}" '
            f'fill="{color}" stroke="#ffffff" stroke-width="1"/></g></a>'
        )
    for p in front:
        shown = p.label if len(p.label) <= 34 else p.label[:33] + "\u2026"
        parts.append(
            f'<text class="frontier-label" data-rank="{p.rank}" data-name="{_e(p.label)}" '
            f'x="{x(p.cost) + 9:.1f}" y="{y(p.quality) - 7:.1f}" fill="#4c1d95">'
            f"#{p.place} {_e(shown)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
