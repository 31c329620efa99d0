"""The quality/cost frontier of a retrieval comparison, and the best row within a budget.

A row is *on a frontier* when no other row has a higher main metric at no more cost and no
row has the same metric at a lower cost, and, among the best row and the rows the paired
test cannot tell from it, no row costs less (:func:`pareto`, :func:`top_group`: the
cheapest of them is what to store); two costs, two frontiers: bytes
per stored document (:func:`bytes_cost`) and the whole query time, encoding and search
(:data:`QUERY_COST`). A budget
(``--max-bytes-per-doc N``, ``--max-query-ms T``) keeps the best row within the limit
(:func:`best_within`) and names the rows it cannot be told apart from (:func:`untold`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from poolkit.compare.bootstrap import interval
from poolkit.compare.ranking import rank

__all__ = [
    "COSTS",
    "QUERY_COST",
    "QUERY_NOISE",
    "best_within",
    "bytes_cost",
    "cheapest",
    "costs",
    "mark",
    "pareto",
    "top_group",
    "untold",
]

# Query times differ from run to run by a few per cent (timings on a shared machine); bytes
# are exact. Times within this fraction of each other count as the same cost: the query
# frontier and the recommended rows do not turn on noise.
QUERY_NOISE = 0.10


def pareto(
    quality: np.ndarray, cost: np.ndarray, top: np.ndarray | None = None, noise: float = 0.0
) -> np.ndarray:
    """Which rows are on the frontier: bool ``(N,)``.

    ``quality`` float ``(N,)`` (higher is better), ``cost`` float ``(N,)`` (lower is
    better; NaN: unknown, never on the frontier and dominating no row). Row ``i`` is off
    it when a known-cost row ``j`` has ``quality[j] >= quality[i]`` and ``cost[j] <=
    cost[i]``, one of them strictly. ``top`` bool ``(N,)``: the best row and the rows the
    paired test cannot tell from it (:func:`top_group`); among them a strictly cheaper row
    also puts a row off it, whatever their point values. ``noise``: a relative cost
    difference that does not count (measured times): ``cost[j] <= cost[i]`` reads
    ``cost[j] <= cost[i] * (1 + noise)`` and strictly cheaper ``cost[j] < cost[i] * (1 -
    noise)``."""
    q = np.asarray(quality, dtype=np.float64)
    c = np.asarray(cost, dtype=np.float64)
    known = ~np.isnan(c)
    qj, qi = q[:, None], q[None, :]  # [j, i]: does row j dominate row i?
    cj, ci = c[:, None], c[None, :]
    with np.errstate(invalid="ignore"):
        no_more, less = cj <= ci * (1 + noise), cj < ci * (1 - noise)
        dominates = (qj >= qi) & no_more & ((qj > qi) | less) & known[:, None]
        if top is not None:
            t = np.asarray(top, dtype=bool)
            dominates |= t[:, None] & t[None, :] & less & known[:, None]
    return known & ~dominates.any(axis=0)


def best_within(quality: np.ndarray, cost: np.ndarray, limit: float) -> int | None:
    """Index of the best row with ``cost <= limit`` (the first of equals, in the given
    order), or None when no known cost is within it. Shapes as :func:`pareto`."""
    c = np.asarray(cost, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.flatnonzero(c <= limit)  # NaN compares False: unknown costs are out
    if ok.size == 0:
        return None
    q = np.asarray(quality, dtype=np.float64)[ok]
    return int(ok[np.flatnonzero(q == q.max())[0]])


def cheapest(cost: np.ndarray) -> int | None:
    """Index of the lowest known cost (the first of equals), or None when none is known."""
    c = np.asarray(cost, dtype=np.float64)
    if np.isnan(c).all():
        return None
    return int(np.nanargmin(c))


def untold(point: np.ndarray, boot: np.ndarray, chosen: int, level: float = 0.95) -> np.ndarray:
    """Which rows cannot be told apart from row ``chosen``: bool ``(N,)`` (False for the
    row itself). ``point`` ``(N,)``: the main metric on the data; ``boot`` ``(R, N)``: it
    on the same ``R`` resamples; a row is untold when the percentile interval at
    ``level`` of ``boot[:, k] - boot[:, chosen]`` includes 0."""
    out = np.zeros(len(point), dtype=bool)
    for k in range(len(point)):
        if k != chosen:
            lo, hi = interval(boot[:, k] - boot[:, chosen], level)
            out[k] = lo <= 0 <= hi
    return out


# ---------------------------------------------------------------------------- on results


def bytes_cost(r: Any) -> float | None:
    """A result's bytes per stored document: its ``bytes_per_document`` cost column
    (:mod:`poolkit.compare.cost`, set for every retrieval row kind), None where unknown."""
    value = r.bytes_per_document
    return None if value is None else float(value)


def _query_cost(r: Any) -> float | None:
    value = r.query_ms  # the whole query cost: encoding + search, where both are measured
    return None if value is None else float(value)


QUERY_COST: Callable[[Any], float | None] = _query_cost
# flag name -> (what the limit bounds, the cost of a result, its unit)
COSTS: dict[str, tuple[str, Callable[[Any], float | None], str]] = {
    "--max-bytes-per-doc": ("bytes per document", bytes_cost, "bytes"),
    "--max-query-ms": ("query time", QUERY_COST, "ms per query"),
}


def costs(results: Sequence[Any], cost: Callable[[Any], float | None]) -> np.ndarray:
    """float ``(N,)``: each result's cost, NaN where unknown."""
    return np.array([np.nan if (v := cost(r)) is None else v for r in results], dtype=np.float64)


def top_group(results: Sequence[Any], metric: str) -> np.ndarray:
    """bool ``(N,)``: the best row by ``metric`` and the rows whose paired interval against
    it (``vs_best``) includes 0; the best alone without intervals."""
    best = id(rank(results, metric)[0])
    return np.array([id(r) == best or (r.vs_best is not None and not r.vs_best.significant)
                     for r in results], dtype=bool)  # fmt: skip


def mark(results: Sequence[Any], metric: str) -> list[Any]:
    """``results`` with ``frontier_bytes`` and ``frontier_query`` set (main ``metric``;
    among the :func:`top_group`, only the cheapest is on a frontier)."""
    quality = np.array([r.metrics[metric] for r in results], dtype=np.float64)
    top = top_group(results, metric)
    on_bytes = pareto(quality, costs(results, bytes_cost), top)
    on_query = pareto(quality, costs(results, QUERY_COST), top, noise=QUERY_NOISE)
    return [
        replace(r, frontier_bytes=bool(b), frontier_query=bool(q))
        for r, b, q in zip(results, on_bytes, on_query, strict=True)
    ]
