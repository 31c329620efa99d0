"""Paired bootstrap for `poolkit compare`: resample the evaluation units, rescore every row
from its stored per-unit results, and read intervals and paired differences off the same
resamples.

A resample is a vector of counts ``w`` ``(N,)`` (how often each unit was drawn), drawn as
``numpy.random.default_rng(seed).integers(0, N, (resamples, N))`` in blocks
(:func:`resample_counts`: the same stream, so a test can redraw it). Every row is scored
on the same resamples, which pairs the differences. Intervals are percentile intervals
(``numpy.percentile``, linear) at :data:`LEVEL`; a row differs *significantly* from a
reference when the interval of the paired difference excludes 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from poolkit._errors import value_error

__all__ = [
    "BLOCK_ELEMENTS",
    "DEFAULT_RESAMPLES",
    "LEVEL",
    "SEED",
    "Evaluation",
    "Paired",
    "RankPlan",
    "block_rows",
    "interval",
    "paired",
    "rank_plan",
    "resample_counts",
    "resampled_scores",
]

DEFAULT_RESAMPLES = 1000
SEED = 0
LEVEL = 0.95
# Counts per block: small enough that a block's (rows, N) float64 arrays stay in the CPU
# cache (the kernels make several passes over them; measured ~3x faster than one big block)
# and that memory stays bounded for large N.
BLOCK_ELEMENTS = 1 << 17


class Evaluation(Protocol):
    """One row's per-unit results: its point metrics and the same metrics on resamples."""

    units: int

    def point(self) -> tuple[float, ...]:
        """The metrics on the data as given (the task's metric order)."""
        ...

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        """Metrics ``(R, M)`` for count vectors ``counts`` ``(R, units)``."""
        ...


def block_rows(n: int) -> int:
    """Resamples per block for ``n`` units."""
    return max(1, BLOCK_ELEMENTS // max(n, 1))


def resample_counts(n: int, resamples: int, seed: int = SEED) -> Iterator[np.ndarray]:
    """Count vectors of ``resamples`` bootstrap samples of ``n`` units, in blocks:
    float64 ``(rows, n)``, each row summing to ``n`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    step = block_rows(n)
    for start in range(0, resamples, step):
        rows = min(step, resamples - start)
        idx = rng.integers(0, n, size=(rows, n))
        flat = (idx + (np.arange(rows) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(np.float64)


def resampled_scores(
    evaluations: Mapping[Hashable, Evaluation], resamples: int, seed: int = SEED
) -> dict[Hashable, np.ndarray]:
    """Every evaluation's metrics on the same ``resamples`` samples: key -> ``(resamples, M)``.

    All evaluations must share their units (same ``units``); that is what pairs them.
    """
    sizes = {e.units for e in evaluations.values()}
    if len(sizes) != 1:
        value_error("evaluations", "over the same units", f"sizes {sorted(sizes)}")
    (n,) = sizes
    parts: dict[Hashable, list[np.ndarray]] = {k: [] for k in evaluations}
    for counts in resample_counts(n, resamples, seed):
        for key, ev in evaluations.items():
            parts[key].append(np.asarray(ev.resampled(counts), dtype=np.float64))
    return {k: np.concatenate(v, axis=0) for k, v in parts.items()}


def interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of ``values`` ``(R,)`` at ``level``."""
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(np.asarray(values, dtype=np.float64), [tail, 100 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Paired:
    """A paired comparison of one metric: ``difference`` = row minus reference on the data,
    ``ci`` its percentile interval over the resamples, ``significant`` = ``ci`` excludes 0."""

    difference: float
    ci: tuple[float, float]

    @property
    def significant(self) -> bool:
        return self.ci[0] > 0 or self.ci[1] < 0


def paired(point: float, reference: float, boot: np.ndarray, boot_reference: np.ndarray) -> Paired:
    """Paired comparison from point values and per-resample values ``(R,)`` of both rows."""
    return Paired(float(point - reference), interval(np.asarray(boot) - np.asarray(boot_reference)))


# ---------------------------------------------------------------------------- kernels
# Weighted forms of the metrics in :mod:`poolkit.compare.metrics`: with counts ``w`` they
# equal the plain metric on the data with unit i repeated w[i] times.


def weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson correlation per row of ``w`` ``(R, N)``; ``x``, ``y`` ``(N,)`` or ``(R, N)``.
    0.0 where either side is constant (as :func:`~poolkit.compare.metrics.pearson`)."""
    total = w.sum(axis=1)
    if np.ndim(x) == 1 and np.ndim(y) == 1:
        # Centred first, so the moments below lose nothing to cancellation.
        xc, yc = x - x.mean(), y - y.mean()
        sx, sy = w @ xc, w @ yc
        sxx, syy, sxy = w @ (xc * xc), w @ (yc * yc), w @ (xc * yc)
    else:
        sx, sxx, wx = _moments(x, w)
        sy, syy, _ = _moments(y, w)
        sxy = np.einsum("rn,rn->r", wx, np.broadcast_to(y, w.shape))
    cov = sxy - sx * sy / total
    denom = np.sqrt(np.maximum(sxx - sx * sx / total, 0) * np.maximum(syy - sy * sy / total, 0))
    return np.divide(cov, denom, out=np.zeros_like(cov), where=denom > 0)


def _moments(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``w``: sum(w x), sum(w x^2) and the product ``w x`` itself."""
    wx = w * x
    return wx.sum(axis=1), np.einsum("rn,rn->r", wx, np.broadcast_to(x, w.shape)), wx


@dataclass(frozen=True)
class RankPlan:
    """How ``x`` ``(N,)`` sorts, computed once and reused for every block of resamples:
    ``order`` (argsort), ``inverse`` (its inverse permutation), tie groups as ``starts`` /
    ``ends`` (inclusive) positions in sorted order and ``group`` (each unit's group)."""

    order: np.ndarray
    inverse: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    group: np.ndarray

    @property
    def ties(self) -> bool:
        return len(self.starts) < len(self.order)


def rank_plan(x: np.ndarray) -> RankPlan:
    """The :class:`RankPlan` of ``x`` ``(N,)``."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sx = x[order]
    new = np.r_[True, sx[1:] != sx[:-1]]
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    starts = np.flatnonzero(new)
    group = (np.cumsum(new) - 1)[inverse]
    return RankPlan(order, inverse, starts, np.r_[starts[1:], len(x)] - 1, group)


def weighted_ranks(x: np.ndarray, w: np.ndarray, plan: RankPlan | None = None) -> np.ndarray:
    """Average ranks ``(R, N)`` of ``x`` ``(N,)`` within each resample of ``w`` ``(R, N)``.

    Unit i stands for ``w[r, i]`` copies; tied copies share their average rank (as
    Spearman's rho needs). Units with zero count get a rank that their zero weight ignores.
    ``plan``: :func:`rank_plan` of ``x``, if already computed.
    """
    plan = plan or rank_plan(x)
    sorted_w = w[:, plan.order]
    upto = np.cumsum(sorted_w, axis=1)  # copies up to and including each sorted unit
    if not plan.ties:
        # Unit i's copies take ranks upto - w + 1 .. upto; their average is upto - (w - 1) / 2.
        sorted_w -= 1
        sorted_w *= 0.5
        upto -= sorted_w
        return upto[:, plan.inverse]
    end_count = upto[:, plan.ends]  # (R, G) copies up to the end of each tie group
    before = np.where(plan.starts > 0, upto[:, np.maximum(plan.starts - 1, 0)], 0.0)
    avg = before + (end_count - before + 1) / 2
    return avg[:, plan.group]


def weighted_spearman(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    x_plan: RankPlan | None = None,
    y_ranks: np.ndarray | None = None,
) -> np.ndarray:
    """Spearman's rho per resample ``(R,)``: Pearson of the within-resample average ranks.

    ``x_plan``: :func:`rank_plan` of ``x``; ``y_ranks``: :func:`weighted_ranks` of ``y``
    under ``w``; either is computed here when not given.
    """
    rx = weighted_ranks(x, w, x_plan)
    ry = weighted_ranks(y, w) if y_ranks is None else y_ranks
    total = w.sum(axis=1)
    # The average ranks of a sample of M copies always sum to M (M + 1) / 2.
    mean_sq = total * ((total + 1) / 2) ** 2
    sxx = np.einsum("rn,rn,rn->r", w, rx, rx) - mean_sq
    syy = np.einsum("rn,rn,rn->r", w, ry, ry) - mean_sq
    sxy = np.einsum("rn,rn,rn->r", w, rx, ry) - mean_sq
    denom = np.sqrt(np.maximum(sxx, 0) * np.maximum(syy, 0))
    return np.divide(sxy, denom, out=np.zeros_like(sxy), where=denom > 0)


def weighted_mean(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mean of ``values`` ``(N,)`` or ``(N, M)`` per resample -> ``(R,)`` or ``(R, M)``."""
    return (w @ values) / w.sum(axis=1).reshape(-1, *([1] * (np.ndim(values) - 1)))


def weighted_macro_f1(gold: np.ndarray, pred: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Macro-F1 per resample over the classes present in it (gold or predicted), as
    :func:`~poolkit.compare.metrics.macro_f1`."""
    classes = np.union1d(gold, pred)
    g = (gold[:, None] == classes[None, :]).astype(np.float64)  # (N, C)
    p = (pred[:, None] == classes[None, :]).astype(np.float64)
    tp, n_gold, n_pred = w @ (g * p), w @ g, w @ p
    f1 = np.divide(2 * tp, n_gold + n_pred, out=np.zeros_like(tp), where=tp > 0)
    present = (n_gold + n_pred) > 0
    return (f1 * present).sum(axis=1) / present.sum(axis=1)


def weighted_f1_counts(
    tp: np.ndarray, n_gold: np.ndarray, n_pred: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """Micro F1 ``2 TP / (gold + predicted)`` from per-unit counts ``(N,)``; 0 without a TP."""
    t, g, p = w @ tp, w @ n_gold, w @ n_pred
    return np.divide(2 * t, g + p, out=np.zeros_like(t), where=t > 0)


def weighted_v_measure(labels: np.ndarray, clusters: np.ndarray, w: np.ndarray) -> np.ndarray:
    """V-measure (beta 1, as ``sklearn.metrics.v_measure_score``) per resample.

    ``labels``, ``clusters`` ``(N,)`` integer codes; the contingency table of each resample
    is ``w`` times the one-hot (label, cluster) cells.
    """
    n_lab, n_clu = int(labels.max()) + 1, int(clusters.max()) + 1
    cell = labels * n_clu + clusters
    onehot = np.zeros((len(cell), n_lab * n_clu))
    onehot[np.arange(len(cell)), cell] = 1.0
    table = (w @ onehot).reshape(len(w), n_lab, n_clu)  # (R, L, K)
    total = table.sum(axis=(1, 2))[:, None, None]
    rows, cols = table.sum(axis=2, keepdims=True), table.sum(axis=1, keepdims=True)

    def entropy(margin: np.ndarray) -> np.ndarray:
        p = margin / total
        return -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=(1, 2))

    filled = table > 0
    # Empty cells contribute 0; feed them a harmless 1 so no log(0) or 0/0 is evaluated.
    ratio = np.where(filled, table, 1.0) * total / np.where(filled, rows * cols, 1.0)
    mi = np.where(filled, table / total * np.log(ratio), 0.0).sum(axis=(1, 2))
    h_lab, h_clu = entropy(rows), entropy(cols)
    hom = np.divide(mi, h_lab, out=np.ones_like(mi), where=h_lab > 0)
    com = np.divide(mi, h_clu, out=np.ones_like(mi), where=h_clu > 0)
    s = hom + com
    return np.divide(2 * hom * com, s, out=np.zeros_like(s), where=s > 0)
