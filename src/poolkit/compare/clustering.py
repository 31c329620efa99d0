"""``poolkit compare --task clustering``: MTEB's clustering protocol on fixed vectors.

k-means with k = the number of distinct labels, as MTEB's ``ClusteringEvaluator`` runs it
(``sklearn.cluster.MiniBatchKMeans``, ``batch_size=500``, ``n_init="auto"``, fit on the
raw vectors), scored by V-measure against the labels; here repeated with seeds
``0 .. RUNS-1`` and averaged, so one unlucky initialisation does not decide a ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BATCH_SIZE", "RUNS", "cluster_runs", "label_codes", "score"]

RUNS = 5
BATCH_SIZE = 500


def label_codes(labels: Sequence[str]) -> np.ndarray:
    """Integer codes ``(N,)`` of ``labels`` (sorted label order)."""
    return np.unique(np.asarray(labels), return_inverse=True)[1].astype(np.int64)


def cluster_runs(vectors: np.ndarray, n_clusters: int, runs: int = RUNS) -> np.ndarray:
    """Cluster assignments ``(runs, N)`` of ``vectors`` ``(N, D)``, one k-means run per seed."""
    import warnings

    from sklearn.cluster import MiniBatchKMeans

    x = np.asarray(vectors, dtype=np.float32)
    out = np.empty((runs, len(x)), dtype=np.int64)
    for seed in range(runs):
        model = MiniBatchKMeans(
            n_clusters=n_clusters, batch_size=BATCH_SIZE, n_init="auto", random_state=seed
        )
        with warnings.catch_warnings():
            # Identical vectors (e.g. a strategy that zeroes every row) warn; the score says it.
            warnings.simplefilter("ignore")
            out[seed] = model.fit(x).labels_
    return out


def score(encoder: Any, data: Any, train: Any, cands: Sequence[Any], settings: Any):
    """``compare``'s scorer: embed the texts once, then :func:`cluster_runs` per candidate
    (:class:`~poolkit.compare.evaluation.ClusterEval`)."""
    from poolkit.compare.embedding import embed_sequences
    from poolkit.compare.evaluation import ClusterEval

    vectors, _ = embed_sequences(encoder, data.texts, cands, settings, f"embedding {data.source}")
    codes = label_codes(data.labels)
    k = int(codes.max()) + 1
    return {c: ClusterEval(codes, cluster_runs(vectors[c], k)) for c in cands}
