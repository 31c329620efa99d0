"""Fusion of two rankings of the same queries into one: reciprocal rank fusion
(:func:`rrf`) and a weighted sum of normalised scores (:func:`score_fusion`).

Both take each side's ranking as document indices best first, int64 ``(Q, K)`` (every
query the same ``K``, as an exact top-``K`` search returns them; the two sides' ``K`` may
differ) and return the fused ranking int64 ``(Q, max(K_a, K_b))``, best first: every
document in either side's list of a query is a candidate, and the fused list of a query
holds at least that many. Equal fused scores go to the larger ``id_order`` first, the tie
rule of every row (:mod:`poolkit.compare.search`).

- RRF: a document's score is ``sum over the sides of 1 / (k + rank)``, ``rank`` 1-based
  in that side's list, nothing from a side whose list lacks it (sentence-transformers'
  ``ReciprocalRankFusionEvaluator`` fuses this way, ``k = 60``).
- Score fusion: each side's scores of a query are normalised over its own list
  (``minmax``: ``(s - min) / (max - min)``, 1 when all are equal; ``z``: ``(s - mean) /
  std``, 0 when all are equal); a document missing from a side's list gets that side's
  lowest normalised value of the query (0 for ``minmax``); the fused score is
  ``weight * a + (1 - weight) * b``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit._errors import value_error

__all__ = ["DEPTH", "NORMS", "RRF_K", "Ranking", "keep_depth", "record", "rrf", "score_fusion"]

RRF_K = 60
DEPTH = 1000  # each side's top 1000, as MTEB keeps a retrieval run
NORMS = ("minmax", "z")


def _check(ranked_a: np.ndarray, ranked_b: np.ndarray) -> None:
    if ranked_a.ndim != 2 or ranked_b.ndim != 2 or len(ranked_a) != len(ranked_b):
        value_error("ranked_b", f"(Q, K) rankings of the same {len(ranked_a)} queries",
                    f"shapes {ranked_a.shape} and {ranked_b.shape}")  # fmt: skip


def _fused(
    a: np.ndarray, value_a: np.ndarray, fill_a: np.ndarray,
    b: np.ndarray, value_b: np.ndarray, fill_b: np.ndarray,
    n_docs: int, id_order: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Fused ranking of the documents of ``a`` ``(Q, K_a)`` and ``b`` ``(Q, K_b)``: each
    distinct document of a query scores ``value_a`` where ``a`` lists it, else ``fill_a``
    ``(Q,)``, plus the same of ``b``; the ``max(K_a, K_b)`` best per query, ties by larger
    ``id_order``."""
    n_q = len(a)
    rows = np.arange(n_q)[:, None]
    keys = np.concatenate([(rows * n_docs + a).ravel(), (rows * n_docs + b).ravel()])
    unique, inverse = np.unique(keys, return_inverse=True)
    query, doc = unique // n_docs, unique % n_docs
    score_a, score_b = fill_a[query], fill_b[query]
    score_a[inverse[: a.size]] = value_a.ravel()  # a query's documents are distinct per side
    score_b[inverse[a.size :]] = value_b.ravel()
    order = np.lexsort((-id_order[doc], -(score_a + score_b), query))
    query, doc = query[order], doc[order]
    start = np.searchsorted(query, np.arange(n_q))
    # Every query has at least max(K_a, K_b) distinct candidates: each side lists its K.
    return doc[start[:, None] + np.arange(max(a.shape[1], b.shape[1]))[None, :]]


def rrf(
    ranked_a: np.ndarray,
    ranked_b: np.ndarray,
    n_docs: int,
    id_order: np.ndarray,
    k: int = RRF_K,
    depth: int | None = None,
) -> np.ndarray:
    """Reciprocal rank fusion of two rankings ``(Q, K_a)``, ``(Q, K_b)`` of ``n_docs``
    documents; ``depth``: each side's top ``depth`` only (None: the whole lists);
    ``id_order`` ``(n_docs,)`` breaks ties. Returns int64 ``(Q, max(K_a, K_b))`` (after the
    cut)."""
    _check(ranked_a, ranked_b)
    if k < 0:
        value_error("k", "at least 0", k)
    a, b = ranked_a[:, :depth], ranked_b[:, :depth]
    score_a = np.broadcast_to(1.0 / (k + np.arange(1, a.shape[1] + 1)), a.shape)
    score_b = np.broadcast_to(1.0 / (k + np.arange(1, b.shape[1] + 1)), b.shape)
    none = np.zeros(len(a))
    return _fused(a, score_a, none, b, score_b, none, n_docs, np.asarray(id_order))


def _normalise(scores: np.ndarray, norm: str) -> np.ndarray:
    """Row-wise normalised ``scores`` ``(Q, K)`` float64 (see the module docstring)."""
    s = np.asarray(scores, dtype=np.float64)
    if norm == "minmax":
        low, span = s.min(axis=1, keepdims=True), np.ptp(s, axis=1, keepdims=True)
        return np.divide(s - low, span, out=np.ones_like(s), where=span > 0)
    mean, std = s.mean(axis=1, keepdims=True), s.std(axis=1, keepdims=True)
    return np.divide(s - mean, std, out=np.zeros_like(s), where=std > 0)


def score_fusion(
    ranked_a: np.ndarray,
    scores_a: np.ndarray,
    ranked_b: np.ndarray,
    scores_b: np.ndarray,
    n_docs: int,
    id_order: np.ndarray,
    weight: float = 0.5,
    norm: str = "minmax",
    depth: int | None = None,
) -> np.ndarray:
    """``weight * a + (1 - weight) * b`` of the normalised scores of two rankings
    (``ranked_*`` int64 ``(Q, K_*)``, ``scores_*`` the same shapes, higher better);
    ``norm``: ``"minmax"`` or ``"z"``; ``depth``, ``id_order`` and the result as in
    :func:`rrf`."""
    _check(ranked_a, ranked_b)
    if not 0.0 <= weight <= 1.0:
        value_error("weight", "between 0 and 1", weight)
    if norm not in NORMS:
        value_error("norm", f"one of {', '.join(NORMS)}", repr(norm))
    a, b = ranked_a[:, :depth], ranked_b[:, :depth]
    na = _normalise(np.asarray(scores_a)[:, :depth], norm)
    nb = _normalise(np.asarray(scores_b)[:, :depth], norm)
    # A document absent from one side's list gets that side's lowest value of the query.
    return _fused(a, weight * na, weight * na.min(axis=1), b, (1 - weight) * nb,
                  (1 - weight) * nb.min(axis=1), n_docs, np.asarray(id_order))  # fmt: skip


@dataclass(frozen=True)
class Ranking:
    """One row's kept ranking: ``ranked`` int64 ``(Q, K)`` best first and its ``scores``
    ``(Q, K)`` (None where the row keeps none)."""

    ranked: np.ndarray
    scores: np.ndarray | None = None


def keep_depth(settings: Any, key: Hashable, depth: int) -> int:
    """How deep to search row ``key``: ``depth``, or deeper where a hybrid fuses it."""
    return max(depth, getattr(settings, "keep", {}).get(key, 0))


def record(settings: Any, key: Hashable, ranked: np.ndarray, scores: Any = None) -> None:
    """Keep row ``key``'s ranking (and scores) where a hybrid fuses it."""
    if key in getattr(settings, "keep", {}):
        settings.rankings[key] = Ranking(ranked, None if scores is None else np.asarray(scores))
