"""Tick values for the report's inline SVG charts: a linear axis and a log axis."""

from __future__ import annotations

import math

__all__ = ["linear_ticks", "log_ticks"]


def linear_ticks(lo: float, hi: float, want: int = 6) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten."""
    span = max(hi - lo, 1e-9)
    raw = span / want
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + k * step, 12) for k in range(int((hi - first) / step + 1e-9) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Log-axis ticks covering [lo, hi]: powers of ten, with 2 and 5 between them when the
    range spans under three decades."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1, 2, 5) if last - first < 3 else (1,)
    return [m * 10.0**p for p in range(first, last + 1) for m in steps if lo <= m * 10.0**p <= hi]
