"""MaxSim: late-interaction scores between token-vector sets, exact and batched.

``score(q, d) = sum over q's tokens i of max over d's tokens j of q_i . d_j`` (MaxSim);
the length-normalised variant divides by q's token count (sentence-transformers'
``meanmaxsim``). Documents are scored in chunks of a bounded number of token pairs, so
memory stays flat with the corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from poolkit._errors import type_error, value_error

__all__ = ["Ragged", "maxsim", "ragged"]

# Token-pair similarities held at once (float32): 16 M pairs, 64 MB.
PAIR_BUDGET = 1 << 24


class Ragged:
    """Token-vector sets stored flat: ``vectors`` ``(T, D)`` float32 and ``offsets``
    ``(n + 1,)`` int64, set ``i`` being ``vectors[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray) -> None:
        self.vectors = vectors
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def width(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def ragged(sets: Sequence[np.ndarray] | Ragged, arg: str) -> Ragged:
    """``sets`` (one ``(n_i, D)`` array each, NumPy or torch) as a :class:`Ragged`; one
    line naming ``arg`` for a set of another width, an empty set, or not a 2-D array."""
    if isinstance(sets, Ragged):
        return sets
    if isinstance(sets, np.ndarray) and sets.ndim == 2:
        sets = [sets]
    if isinstance(sets, str | bytes) or not isinstance(sets, Sequence | np.ndarray):
        type_error(arg, "a list of (tokens, dims) arrays", type(sets).__name__)
    arrays = []
    for i, s in enumerate(sets):
        a = np.asarray(s.detach().cpu().float() if hasattr(s, "detach") else s, dtype=np.float32)
        if a.ndim != 2:
            value_error(f"{arg}[{i}]", "a (tokens, dims) array", f"shape {a.shape}")
        if not len(a):
            value_error(f"{arg}[{i}]", "at least one token vector", "none")
        if arrays and a.shape[1] != arrays[0].shape[1]:
            value_error(f"{arg}[{i}]", f"{arrays[0].shape[1]} dimensions like {arg}[0]",
                        a.shape[1])  # fmt: skip
        arrays.append(a)
    lengths = np.fromiter((len(a) for a in arrays), np.int64, count=len(arrays))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    width = arrays[0].shape[1] if arrays else 0
    flat = np.concatenate(arrays) if arrays else np.zeros((0, width), np.float32)
    return Ragged(flat, offsets)


def maxsim(
    queries: Sequence[np.ndarray] | Ragged,
    documents: Sequence[np.ndarray] | Ragged,
    *,
    normalize: bool = False,
    pair_budget: int = PAIR_BUDGET,
) -> np.ndarray:
    """MaxSim scores ``(Q, N)`` float32 of every query against every document.

    Args:
        queries, documents: one ``(n_i, D)`` array per text (as :func:`poolkit.embed`
            returns for a multi-vector recipe), or a :class:`Ragged`; one width for all.
        normalize: divide each query's scores by its token count (``meanmaxsim``).
        pair_budget: token pairs scored at once (memory: 4 bytes each).
    """
    q, d = ragged(queries, "queries"), ragged(documents, "documents")
    if len(q) and len(d) and q.width != d.width:
        value_error("documents", f"token vectors of the queries' width {q.width}", d.width,
                    "Embed both sides with the same recipe (the same /DIMS).")  # fmt: skip
    out = np.zeros((len(q), len(d)), dtype=np.float32)
    if not len(q) or not len(d):
        return out
    q_len = q.lengths
    # Query rows in groups, documents in chunks: each product holds at most pair_budget.
    for q0, q1 in _chunks(q.offsets, max(1, pair_budget // max(int(d.lengths.max()), 1))):
        qv = q.vectors[q.offsets[q0] : q.offsets[q1]]
        starts_q = q.offsets[q0:q1] - q.offsets[q0]
        for d0, d1 in _chunks(d.offsets, max(1, pair_budget // max(len(qv), 1))):
            dv = d.vectors[d.offsets[d0] : d.offsets[d1]]
            sims = qv @ dv.T  # (q tokens, d tokens)
            best = np.maximum.reduceat(sims, d.offsets[d0:d1] - d.offsets[d0], axis=1)
            out[q0:q1, d0:d1] = np.add.reduceat(best, starts_q, axis=0)
    if normalize:
        out /= q_len[:, None].astype(np.float32)
    return out


def _chunks(offsets: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive set ranges ``[a, b)`` holding at most ``budget`` tokens (one set at least)."""
    out, a, n = [], 0, len(offsets) - 1
    while a < n:
        b = int(np.searchsorted(offsets, offsets[a] + budget, side="right")) - 1
        b = min(max(b, a + 1), n)
        out.append((a, b))
        a = b
    return out
