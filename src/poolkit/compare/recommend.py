"""What ``compare`` recommends storing: the best row, and the cheapest rows that the paired
test cannot tell from it, by bytes per document and by the whole query cost.

A row is *tied* with the best (the table's #1) when the paired bootstrap interval of its
main metric minus the best's includes 0 (:func:`tied_with_best`: the ``vs_best`` the table
and the JSON carry); the best is tied with itself. :func:`pick` is pure: costs and ties in,
indices out. :func:`answer_lines` and :func:`answer_json` say it in text and in the
``--json`` file's ``recommended``; :func:`budget_hints` names the ``--max-bytes-per-doc`` /
``--max-query-ms`` values that pick each tied row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit.compare.frontier import COSTS, QUERY_NOISE, best_within, costs

__all__ = [
    "Picked",
    "answer_json",
    "answer_lines",
    "budget_hints",
    "bytes_of",
    "pick",
    "picked",
    "tied_with_best",
]


@dataclass(frozen=True)
class Picked:
    """Indices into the ranked rows: ``best``, and the tied rows with the fewest bytes
    (``bytes``) and the lowest query cost (``query``); None where no tied row has that cost."""

    best: int
    bytes: int | None
    query: int | None


def _key(cost: float | None) -> float:
    return math.inf if cost is None else cost


def _below(a: float | None, b: float | None, exact: bool) -> bool:
    """Whether cost ``a`` is clearly below ``b``: at all for bytes, by more than
    ``QUERY_NOISE`` of ``b`` for times; False where either is unknown."""
    if a is None or b is None:
        return False
    return a < b if exact else a < b * (1 - QUERY_NOISE)


def _same(a: float | None, b: float | None, exact: bool) -> bool:
    if a is None or b is None:
        return False
    return a == b if exact else abs(a - b) <= QUERY_NOISE * max(a, b)


def _cheapest(first: Sequence[float | None], second: Sequence[float | None],
              tied: Sequence[bool], best: int, exact: tuple[bool, bool]) -> int | None:  # fmt: skip
    """The tied row that saves on ``first`` against ``best`` (clearly below it, or the same
    and clearly below on ``second``) with the lowest ``first``, ties broken by ``second``
    (unknown: last), then by rank; ``best`` where no row saves (None where its ``first``
    is unknown and no tied row's is known). A best of unknown cost: any known one saves."""
    savers = [
        i for i, t in enumerate(tied)
        if t and i != best and first[i] is not None and (
            first[best] is None or _below(first[i], first[best], exact[0])
            or (_same(first[i], first[best], exact[0])
                and _below(second[i], second[best], exact[1])))
    ]  # fmt: skip
    if not savers:
        return None if first[best] is None else best
    return min(savers, key=lambda i: (first[i], _key(second[i]), i))


def pick(
    bytes_cost: Sequence[float | None],
    query_cost: Sequence[float | None],
    tied: Sequence[bool],
    best: int = 0,
) -> Picked:
    """The recommended rows of rows in rank order: ``best``; among the rows with
    ``tied[i]`` (the paired interval against the best includes 0), the one with the fewest
    bytes (ties: the lower query cost, then the better rank) and the one with the lowest
    query cost (ties: the fewer bytes, then the better rank) — each only where it saves
    against the best: fewer bytes, or a query cost more than ``QUERY_NOISE`` lower (the
    same cost and a clear saving on the other also counts); else the best itself. None (a
    cost unknown) never wins."""
    ties = [t or i == best for i, t in enumerate(tied)]
    return Picked(best, _cheapest(bytes_cost, query_cost, ties, best, (True, False)),
                  _cheapest(query_cost, bytes_cost, ties, best, (False, True)))  # fmt: skip


# ---------------------------------------------------------------------------- on results


def bytes_of(r: Any) -> float | None:
    """A result's bytes: per stored document (retrieval), else per stored vector (``sts``
    budget rows); None where unknown."""
    value = r.bytes_per_document if r.bytes_per_document is not None else r.bytes_per_vector
    return None if value is None else float(value)


def _query_of(r: Any) -> float | None:
    return r.query_ms  # the whole query cost: encoding + search


def tied_with_best(ranked: Sequence[Any]) -> list[bool]:
    """For results in rank order: whether the paired interval of each one's main metric
    minus the best's (``vs_best``) includes 0; True for the best, False without one."""
    return [i == 0 or (r.vs_best is not None and not r.vs_best.significant)
            for i, r in enumerate(ranked)]  # fmt: skip


def picked(ranked: Sequence[Any]) -> Picked:
    """:func:`pick` on results in rank order (:func:`bytes_of`, the whole query cost)."""
    return pick([bytes_of(r) for r in ranked], [_query_of(r) for r in ranked],
                tied_with_best(ranked))  # fmt: skip


def _cost_text(r: Any, per: str) -> str:
    """``1536 bytes/doc, 0.75 ms/query``: the costs a row has."""
    parts = []
    if (b := bytes_of(r)) is not None:
        parts.append(f"{b:.0f} bytes/{per}")
    if (q := _query_of(r)) is not None:
        parts.append(f"{q:.2f} ms/query")
    return ", ".join(parts)


def _signed(x: float) -> str:
    return f"{x:+.4f}".replace("-", "\u2212")


def _savings(r: Any, best: Any, per: str) -> str:
    """What row ``r`` saves against ``best``: ``saves 366474 bytes/doc and 42.99
    ms/query``; a cost it adds: ``costs 0.10 ms/query more``."""
    saved, added = [], []
    for unit, cost in ((f"bytes/{per}", bytes_of), ("ms/query", _query_of)):
        a, b = cost(r), cost(best)
        if a is None or b is None:
            continue
        digits = 0 if unit.startswith("bytes") else 2
        (saved if b >= a else added).append(f"{abs(b - a):.{digits}f} {unit}")
    parts = [f"saves {' and '.join(saved)}"] if saved else []
    if added:
        parts.append(f"costs {' and '.join(added)} more")
    return ", ".join(parts)


def budget_hints(ranked: Sequence[Any], metric: str) -> list[str]:
    """Per cost flag, the limits that pick each tied row (:func:`tied_with_best`): its cost
    rounded up (bytes to a whole number, ms to 0.01), kept where ``best_within`` at that
    limit is that row (of two times within ``QUERY_NOISE``, the better row's only); a flag
    only where it picks two rows or more.
    ``--max-bytes-per-doc 814 #4 bm25, 1536 #2 mean``."""
    tied = tied_with_best(ranked)
    quality = np.array([r.metrics[metric] for r in ranked], dtype=np.float64)
    out = []
    for flag, (_, cost_of, _) in COSTS.items():
        cost = costs(ranked, cost_of)
        scale = 1 if flag == "--max-bytes-per-doc" else 100
        picks: dict[int, float] = {}
        for i in sorted((i for i in range(len(ranked)) if tied[i] and not np.isnan(cost[i])),
                        key=lambda i: cost[i]):  # fmt: skip
            limit = math.ceil(cost[i] * scale - 1e-9) / scale
            if best_within(quality, cost, limit) == i and i not in picks:
                last = next(reversed(picks), None)
                if scale != 1 and last is not None and cost[i] <= cost[last] * (1 + QUERY_NOISE):
                    del picks[last]  # the same time (run-to-run noise): the better row only
                picks[i] = limit
        if len(picks) > 1:  # a flag that picks one row only picks nothing among them
            said = [f"{limit:g} #{i + 1} {ranked[i].label}" for i, limit in picks.items()]
            out.append(f"{flag} {said[0]}" + "".join(f", {s}" for s in said[1:]))
    return out


def answer_lines(
    task: str,
    ranked: Sequence[Any],
    bootstrap: dict | None,
    command: Callable[[Any], str],
) -> list[str]:
    """The answer the output opens with: the best row, the cheapest rows tied with it by
    bytes and by query cost (where rows have them), one line per cheaper row on what it
    saves, the budget flags that pick among tied rows (retrieval), and each named row's
    command (``command``)."""
    from poolkit.compare.report import METRICS

    metric = METRICS[task][0]
    per = "doc" if task == "retrieval" else "vector"
    p = picked(ranked)
    best = ranked[p.best]

    def name(i: int) -> str:
        return f"#{i + 1} {ranked[i].label}"

    cost = _cost_text(best, per)
    out = [f"best: {name(p.best)} ({metric} {best.metrics[metric]:.4f}"
           + (f"; {cost})" if cost else ")")]  # fmt: skip
    shown = [p.best]
    groups: dict[int, list[str]] = {}  # a picked row -> the costs it is cheapest by
    for role, k in ((f"bytes/{per}", p.bytes), ("query time", p.query)):
        if k is not None:
            groups.setdefault(k, []).append(role)
    if bootstrap is None and groups:
        out.append("cheapest tied with #1: no row named (no paired test with --bootstrap 0).")
        groups = {}
    tied = [k for k, t in enumerate(tied_with_best(ranked)) if t and k != p.best]
    for i, roles in groups.items():
        by = " and by ".join(roles)
        if i == p.best:
            listed = ", ".join(f"#{k + 1}" for k in tied)
            out.append(f"cheapest tied with #1 by {by}: #1 itself"
                       + (f"; no row tied with it ({listed}) costs less." if tied
                          else " (no other row is tied with it)."))  # fmt: skip
            continue
        r, vs = ranked[i], ranked[i].vs_best
        paired = f"vs #1 {_signed(vs.difference)} [{_signed(vs.ci[0])}, {_signed(vs.ci[1])}]"
        out.append(f"cheapest tied with #1 by {by}: {name(i)} ({metric} "
                   f"{r.metrics[metric]:.4f}, {paired}; {_cost_text(r, per)}).")  # fmt: skip
        shown.append(i)
    for i in shown[1:]:
        out.append(f"{name(i)} is not the best point estimate but {_savings(ranked[i], best, per)} "
                   f"against #1, at a {metric} the paired test cannot tell from #1's.")  # fmt: skip
    if task == "retrieval" and bootstrap is not None and tied:
        hints = budget_hints(ranked, metric)
        if hints:
            out.append("budgets: " + "; ".join(hints) + " (the best row within each limit).")
    out += [f"embed {name(i)}: {command(ranked[i])}" for i in shown]
    return out


def _row_json(ranked: Sequence[Any], i: int | None, best: int,
              command: Callable[[Any], str] | None) -> dict | None:  # fmt: skip
    """One recommended row of the JSON: rank, name, costs, ``vs_best``, what it saves."""
    if i is None:
        return None
    r, b = ranked[i], ranked[best]
    saves = {}
    for field, cost in (("bytes", bytes_of), ("query_ms", _query_of)):
        a, c = cost(r), cost(b)
        saves[field] = None if a is None or c is None else c - a
    vs = r.vs_best
    out = {
        "rank": i + 1, "name": r.label, "recipe": str(r.recipe), "bytes": bytes_of(r),
        "query_ms": _query_of(r),
        "vs_best": None if vs is None else {"value": vs.difference, "ci": list(vs.ci)},
        "saves": saves,
    }  # fmt: skip
    if command is not None:
        out["embed_command"] = command(r)
    return out


def answer_json(
    task: str, ranked: Sequence[Any], command: Callable[[Any], str] | None = None
) -> dict:
    """The JSON's ``recommended``: ``metric``, ``best``, ``cheapest_tied_bytes`` and
    ``cheapest_tied_query`` (:func:`picked`; each ``{"rank", "name", "recipe", "bytes",
    "query_ms", "vs_best", "saves", "embed_command"}`` or null)."""
    from poolkit.compare.report import METRICS

    p = picked(ranked)
    return {
        "metric": METRICS[task][0],
        "best": _row_json(ranked, p.best, p.best, command),
        "cheapest_tied_bytes": _row_json(ranked, p.bytes, p.best, command),
        "cheapest_tied_query": _row_json(ranked, p.query, p.best, command),
    }
