"""Ranking metrics of a reference score matrix, up to near-ties.

A row of ``compare`` ranks by float32 scores computed in its own order (BLAS blocks, thread
count, another forward pass); a test's reference ranks by float64 scores of the vectors
written by ``embed`` or by another library. Two documents whose reference scores differ by
less than the float error of those computations (or are equal: trec_eval breaks that tie
by document id, compare's float32 noise may not see it as a tie) can come out in either
order, and a relevant one among them moves the metric. So the reference gives a range: the
metric with every group of near-tied documents ordered worst first (irrelevant first) and
best first (most relevant first). Without near-ties the two ends are one value, and the
check is exact. (docs/equality.md: a metric is compared at 1e-6 only where the vectors and
the scores' order are the same.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytrec_eval

# One float32 rounding step: the standard bound of a dot product of D terms is
# D * 2**-24 * |a| |b|, doubled here for the other side's own rounding (another pass, order).
_STEP = 2.0**-24


def dot_eps(queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """Per query, the float32 error bound of its dot products with ``documents``
    (``(Q, D)``, ``(N, D)``): 2 x its nonzero count x 2**-24 x its norm x the longest
    document's norm. Cosine, sparse dot products and one-vector MUVERA rows."""
    q, d = np.asarray(queries, np.float64), np.asarray(documents, np.float64)
    longest = np.linalg.norm(d, axis=1).max()
    return 2 * (q != 0).sum(axis=1) * _STEP * np.linalg.norm(q, axis=1) * longest


def maxsim_eps(queries: list[np.ndarray], documents: list[np.ndarray]) -> np.ndarray:
    """Per query, the float32 error bound of its MaxSim scores: each of the query's tokens
    adds one dot product over D values, doubled for the sum over tokens and for another
    pass's rounding."""
    width = documents[0].shape[1]
    longest = max(np.linalg.norm(x, axis=1).max() for x in documents)
    return np.array([2 * width * _STEP * np.linalg.norm(x, axis=1).sum() * longest
                     for x in queries])  # fmt: skip


def order(scores: np.ndarray, gains: np.ndarray, eps: float, best: bool) -> np.ndarray:
    """Columns of ``scores`` ``(N,)`` best first, each near-tie group (neighbours closer
    than ``eps``, chained) ordered by ``gains`` ``(N,)``, high first if ``best``."""
    by_score = np.argsort(-scores, kind="stable")
    steps = -np.diff(scores[by_score])  # >= 0
    group = np.concatenate([[0], np.cumsum(steps > eps)])
    sign = -1 if best else 1
    return by_score[np.lexsort((sign * gains[by_score], group))]


def query_ranges(
    qrels: dict[str, dict[str, int]],
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    scores: np.ndarray,
    eps: np.ndarray,
    measures: dict[str, str],
    first: tuple[np.ndarray, np.ndarray, int] | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{name: (worst, best)}``: per judged query (in ``query_ids`` order), each pytrec_eval
    ``measures`` value (name -> pytrec_eval key, e.g. ``"ndcg_cut_10"``) of ``scores``
    ``(Q, N)``, near-ties of query ``i`` being scores within ``eps[i]``. ``first``: a first
    stage ``(scores (Q, N), eps (Q,), depth)`` whose top ``depth`` documents are the only
    ones ranked; a near-tie group across its cut is admitted by :func:`_admission`."""
    keys = {".".join(k.rsplit("_", 1)) for k in measures.values()}  # ndcg_cut_10: ndcg_cut.10
    ends = []
    for best in (False, True):
        run = {}
        for i, qid in enumerate(query_ids):
            if qid not in qrels:
                continue
            gains = np.array([qrels[qid].get(d, 0) for d in doc_ids], np.float64)
            cols = np.arange(len(doc_ids))
            if first is not None:
                s1, eps1, depth = first
                cols = order(s1[i], _admission(gains, scores[i]), float(eps1[i]), best)[:depth]
            gains = gains[cols]
            ranked = cols[order(scores[i, cols], gains, float(eps[i]), best)]
            run[qid] = {doc_ids[j]: float(len(ranked) - r) for r, j in enumerate(ranked)}
        per = pytrec_eval.RelevanceEvaluator(qrels, keys).evaluate(run)
        ends.append({n: np.array([per[q][k] for q in run]) for n, k in measures.items()})
    return {n: (ends[0][n], ends[1][n]) for n in measures}


def _admission(gains: np.ndarray, final: np.ndarray) -> np.ndarray:
    """A key ``(N,)`` for :func:`order` over a first stage's near-ties at its cut: high is
    better for the metric. Relevant documents above irrelevant ones (by gain, then by
    ``final`` score, high first); irrelevant ones by ``final`` score, low first, as one
    that ranks high in the second stage pushes the relevant ones down."""
    rank = np.argsort(np.argsort(final, kind="stable"), kind="stable")  # 0: lowest score
    n = len(final)
    return np.where(gains > 0, gains * (n + 1) + rank, -rank - 1).astype(np.float64)


def metric_range(*args: Any, **kwargs: Any) -> dict[str, tuple[float, float]]:
    """``{name: (worst, best)}``: the mean over judged queries of :func:`query_ranges`
    (the same arguments)."""
    got = query_ranges(*args, **kwargs)
    return {n: (float(lo.mean()), float(hi.mean())) for n, (lo, hi) in got.items()}
