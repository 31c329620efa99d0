"""Exact top-``k`` search in blocks: by cosine (:func:`top_k`) or by any score
(:func:`top_k_by`), with trec_eval's tie rule (equal scores: the larger document id first,
:func:`id_order`). Retrieval, the budget rows and the Hamming index share it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["id_order", "top_k", "top_k_by", "unit_rows"]


def unit_rows(x: np.ndarray) -> np.ndarray:
    """``x`` ``(N, D)`` as float32 rows of unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def top_k(
    queries: np.ndarray,
    documents: np.ndarray,
    k: int,
    id_order: np.ndarray | None = None,
    query_block: int = 256,
    doc_block: int = 16384,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine top-``k`` documents per query.

    ``queries`` ``(Q, D)``, ``documents`` ``(N, D)``; ``id_order`` ``(N,)``: ties on score go
    to the larger ``id_order`` first (default: document index). Returns indices int64 and
    float32 scores, both ``(Q, min(k, N))``, best first. Works through ``query_block x
    doc_block`` score blocks, so memory is the unit-length float32 vectors plus the
    running top-k.
    """
    q_unit, d_unit = unit_rows(queries), unit_rows(documents)
    return top_k_by(
        lambda q0, q1, d0, d1: q_unit[q0:q1] @ d_unit[d0:d1].T, len(q_unit), len(d_unit), k,
        id_order, query_block, doc_block,
    )  # fmt: skip


def top_k_by(
    scores_of: Callable[[int, int, int, int], np.ndarray],
    n_queries: int,
    n_docs: int,
    k: int,
    id_order: np.ndarray | None = None,
    query_block: int = 256,
    doc_block: int = 16384,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` by any score: ``scores_of(q0, q1, d0, d1)`` gives the scores of
    queries ``q0:q1`` against documents ``d0:d1`` (higher is better); ties and blocks as in
    :func:`top_k`. Returns indices int64 and the scores, both ``(Q, min(k, N))``."""
    n = n_docs
    k = min(k, n)
    order_key = np.arange(n) if id_order is None else np.asarray(id_order)
    out_i = np.empty((n_queries, k), dtype=np.int64)
    out_s: np.ndarray | None = None
    for q0 in range(0, n_queries, query_block):
        q1 = min(q0 + query_block, n_queries)
        best_s: np.ndarray | None = None
        best_i = np.empty((q1 - q0, 0), dtype=np.int64)
        for d0 in range(0, n, doc_block):
            scores = scores_of(q0, q1, d0, min(d0 + doc_block, n))
            idx = np.broadcast_to(np.arange(d0, d0 + scores.shape[1]), scores.shape)
            best_s = scores if best_s is None else np.hstack([best_s, scores])
            best_i = np.hstack([best_i, idx])
            if best_s.shape[1] > k:
                keep = _keep_top(best_s, best_i, k, order_key)
                best_s = np.take_along_axis(best_s, keep, axis=1)
                best_i = np.take_along_axis(best_i, keep, axis=1)
        assert best_s is not None
        if out_s is None:
            out_s = np.empty((n_queries, k), dtype=best_s.dtype)
        # Best first; equal scores: larger id first (trec_eval sorts ties by docno, decreasing).
        rank = np.lexsort((-order_key[best_i], -best_s), axis=1)
        out_i[q0:q1] = np.take_along_axis(best_i, rank, axis=1)
        out_s[q0:q1] = np.take_along_axis(best_s, rank, axis=1)
    if out_s is None:
        out_s = np.empty((n_queries, k), dtype=np.float32)
    return out_i, out_s


def _keep_top(scores: np.ndarray, idx: np.ndarray, k: int, order_key: np.ndarray) -> np.ndarray:
    """Columns of the ``k`` best of each row of ``scores`` ``(B, M)``, ties at the ``k``-th
    score going to the larger ``order_key[idx]`` as the final sort orders them (a bare
    partition would keep an arbitrary one of them, and the ranking could lose a document
    that trec_eval ranks ``k``-th)."""
    keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, keep, axis=1).min(axis=1, keepdims=True)
    tied_all = (scores == kth).sum(axis=1)
    tied_kept = (np.take_along_axis(scores, keep, axis=1) == kth).sum(axis=1)
    for r in np.flatnonzero(tied_all > tied_kept):  # rare: only rows with a tie cut at k
        keep[r] = np.lexsort((-order_key[idx[r]], -scores[r]))[:k]
    return keep


def id_order(ids: Sequence[str]) -> np.ndarray:
    """Rank ``(N,)`` of each id in sorted (string) order, for :func:`top_k`'s tie rule."""
    order = np.argsort(np.asarray(ids, dtype=object), kind="stable")
    rank = np.empty(len(ids), dtype=np.int64)
    rank[order] = np.arange(len(ids))
    return rank
