"""Token pooling: fewer vectors per text by Ward clustering, as late-interaction indexes do.

One text's token vectors ``(n, D)`` become ``(m, D)``: the first ``protected`` tokens
(the ``[CLS]``) are kept as they are; the others are clustered by Ward linkage on the
cosine distance ``clip(1 - x_i . x_j, 0, 2)`` into ``floor((n - protected) / pool_factor)``
clusters (at least one), and each cluster is replaced by its mean, clusters in the order
of their first label. Every output vector is L2-normalised. This is the rule of
sentence-transformers' ``HierarchicalTokenPooling`` (``pool_factor``,
``num_protected_tokens=1``, ``normalize_embeddings=True``), so an index pooled by either
holds the same vectors. Needs SciPy (the ``compare`` extra).
"""

from __future__ import annotations

import math

import numpy as np

from poolkit._errors import missing_extra, value_error
from poolkit.errors import MissingDependencyError

__all__ = ["check_pool_factor", "pool_tokens"]


def check_pool_factor(pool_factor: object, arg: str = "pool_factor") -> float:
    """``pool_factor`` as a float >= 1 (one line naming ``arg`` otherwise)."""
    ok = isinstance(pool_factor, int | float) and not isinstance(pool_factor, bool)
    if not ok or not math.isfinite(float(pool_factor)) or float(pool_factor) < 1:  # type: ignore[arg-type]
        value_error(arg, "a number >= 1 (1 keeps every token; 2 keeps about half)",
                    repr(pool_factor), "e.g. multivector:tokens/pool2.")  # fmt: skip
    return float(pool_factor)  # type: ignore[arg-type]


def _l2(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norm, 1e-12)).astype(np.float32)


def pool_tokens(vectors: np.ndarray, pool_factor: float, *, protected: int = 1) -> np.ndarray:
    """One text's token vectors ``(n, D)`` pooled to ``(m, D)`` float32 (module docstring).

    ``m = min(n, protected) + clusters``; with ``pool_factor == 1`` (or one poolable token)
    no token merges and the vectors are only L2-normalised."""
    pool_factor = check_pool_factor(pool_factor)
    x = np.asarray(vectors, dtype=np.float32)
    keep = min(protected, len(x))
    head, rest = x[:keep], x[keep:]
    target = max(int(len(rest) // pool_factor), 1)
    if len(rest) <= 1 or target >= len(rest):
        return _l2(x)
    if target == 1:
        means = rest.mean(axis=0, keepdims=True)
    else:
        labels = _ward_labels(rest, target)
        sums = np.zeros((labels.max() + 1, x.shape[1]), dtype=np.float32)
        np.add.at(sums, labels, rest)
        means = sums / np.bincount(labels)[:, None].astype(np.float32)
    return _l2(np.concatenate([head, means]))


def _ward_labels(x: np.ndarray, clusters: int) -> np.ndarray:
    """Dense 0-based cluster labels ``(n,)`` of a Ward tree cut into ``clusters``."""
    try:
        from scipy.cluster.hierarchy import fcluster, linkage
        from scipy.spatial.distance import squareform
    except ImportError:
        raise MissingDependencyError(missing_extra("Token pooling", "scipy", "compare")) from None
    distances = np.clip(1 - x @ x.T, 0, 2)
    tree = linkage(squareform(distances, checks=False), method="ward")
    raw = fcluster(tree, t=clusters, criterion="maxclust")
    return np.unique(raw, return_inverse=True)[1].reshape(-1)
