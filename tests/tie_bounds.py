"""Ranking metrics of a reference score matrix, up to near-ties.

A row of ``compare`` ranks by float32 scores computed in its own order (BLAS blocks, thread
count, another forward pass); a test's reference ranks by float64 scores of the vectors
written by ``embed`` or by another library. Two documents whose reference scores differ by
less than the float error of those computations (or are equal: trec_eval breaks that tie
by document id, compare's float32 noise may not see it as a tie) can come out in either
order, and a relevant one among them moves the metric. So the reference gives a range: the
metric with every group of near-tied documents ordered worst first (irrelevant first) and
best first (most relevant first). Without near-ties the two ends are one value, and the
check is exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytrec_eval


def _order(scores: np.ndarray, gains: np.ndarray, eps: float, best: bool) -> np.ndarray:
    """Columns of ``scores`` ``(N,)`` best first, each near-tie group (neighbours closer
    than ``eps``, chained) ordered by ``gains`` ``(N,)``, high first if ``best``."""
    by_score = np.argsort(-scores, kind="stable")
    steps = -np.diff(scores[by_score])  # >= 0
    group = np.concatenate([[0], np.cumsum(steps > eps)])
    sign = -1 if best else 1
    return by_score[np.lexsort((sign * gains[by_score], group))]


def metric_range(
    qrels: dict[str, dict[str, int]],
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    scores: np.ndarray,
    eps: np.ndarray,
    measures: dict[str, str],
    keep: np.ndarray | None = None,
) -> dict[str, tuple[float, float]]:
    """``{name: (worst, best)}``: the mean over judged queries of each pytrec_eval
    ``measures`` value (name -> pytrec_eval key, e.g. ``"ndcg_cut_10"``) of ``scores``
    ``(Q, N)``, near-ties of query ``i`` being scores within ``eps[i]``; ``keep`` ``(Q, k)``:
    only those documents of each query are ranked."""
    keys = {".".join(k.rsplit("_", 1)) for k in measures.values()}  # ndcg_cut_10: ndcg_cut.10
    ends = []
    for best in (False, True):
        run = {}
        for i, qid in enumerate(query_ids):
            if qid not in qrels:
                continue
            cols = np.arange(len(doc_ids)) if keep is None else np.asarray(keep[i])
            gains = np.array([qrels[qid].get(doc_ids[j], 0) for j in cols], np.float64)
            order = cols[_order(scores[i, cols], gains, float(eps[i]), best)]
            run[qid] = {doc_ids[j]: float(len(order) - r) for r, j in enumerate(order)}
        per = pytrec_eval.RelevanceEvaluator(qrels, keys).evaluate(run)
        ends.append({n: float(np.mean([v[k] for v in per.values()])) for n, k in measures.items()})
    return {n: (ends[0][n], ends[1][n]) for n in measures}
