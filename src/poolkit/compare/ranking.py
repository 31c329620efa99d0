"""Rows in rank order: best first by the main metric, ties (equal to 12 decimals) broken
the same way everywhere (the table, the frontier's top group, the answer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["rank", "tie_key", "tied"]


def tie_key(value: float) -> float:
    # Equal up to float noise counts as a tie; 12 decimals is far below any real difference.
    return round(value, 12)


def rank(results: Sequence[Any], metric: str) -> list[Any]:
    """Best first by ``metric``. Ties (equal to 12 decimals) put the intended row first,
    then order by the task's other metrics, then keep the given order (deterministic)."""
    order = {id(r): i for i, r in enumerate(results)}
    return sorted(
        results,
        key=lambda r: (
            -tie_key(r.metrics[metric]),
            not r.intended,
            *(-tie_key(v) for k, v in r.metrics.items() if k != metric),
            order[id(r)],
        ),
    )


def tied(ranked: Sequence[Any], metric: str) -> list[bool]:
    """For rows in rank order: whether each shares its ``metric`` value with another row."""
    keys = [tie_key(r.metrics[metric]) for r in ranked]
    return [keys.count(k) > 1 for k in keys]
