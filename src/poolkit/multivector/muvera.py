"""MUVERA: a token-vector set folded into one fixed-size vector (a fixed dimensional encoding).

For each of ``r_reps`` repetitions, ``k_sim`` random hyperplanes split the space into
``2**k_sim`` partitions (SimHash: a token's partition is its sign pattern, bit ``i`` from
hyperplane ``i``); each partition's tokens are summed (queries) or averaged (documents,
where an empty partition takes the first token of the nearest non-empty partition by
Hamming distance of the partition ids, the lowest id on ties); the ``2**k_sim`` partition
vectors are projected to ``dim_proj`` by a random ``+-1`` matrix scaled ``1/sqrt(dim_proj)``
(no projection when ``dim_proj`` equals the token width) and concatenated. The dot product
of a query's and a document's encodings approximates their MaxSim.

The random draws follow fastembed's ``Muvera`` (0.9.1): one ``numpy.random.default_rng(seed)``
gives each repetition's hyperplanes ``normal(size=(dim, k_sim))`` in turn, then the
projections ``choice([-1, 1], size=(r_reps, dim, dim_proj))``; so the same options and
seed give the same encodings, and a corpus encoded by one can be queried by the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from poolkit._errors import value_error

__all__ = ["MUVERA_DEFAULTS", "MuveraOptions", "muvera_encode"]


@dataclass(frozen=True)
class MuveraOptions:
    """MUVERA's options (fastembed's defaults): ``k_sim`` hyperplanes (``2**k_sim``
    partitions), projected width ``dim_proj``, ``r_reps`` repetitions, ``seed``."""

    k_sim: int = 5
    dim_proj: int = 16
    r_reps: int = 20
    seed: int = 42

    def __post_init__(self) -> None:
        for name, low, high in (("k_sim", 1, 16), ("dim_proj", 1, 1 << 16),
                                ("r_reps", 1, 1 << 12), ("seed", 0, (1 << 63) - 1)):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                value_error(name, f"an integer in {low}..{high}", repr(value),
                            "e.g. multivector:tokens/muvera:k_sim=5,dim_proj=16.")  # fmt: skip

    def to_json(self) -> dict[str, int]:
        """The options as a JSON-ready dict (``MuveraOptions(**d)`` reads it back)."""
        return {k: getattr(self, k) for k in ("k_sim", "dim_proj", "r_reps", "seed")}

    def output_dim(self) -> int:
        """Width of one encoding: ``r_reps * 2**k_sim * dim_proj``."""
        return self.r_reps * (1 << self.k_sim) * self.dim_proj

    def check_width(self, width: int) -> None:
        """Refuse token vectors narrower than ``dim_proj`` (a projection never widens)."""
        if self.dim_proj > width:
            value_error("dim_proj", f"at most the token width {width}", self.dim_proj,
                        f"Use muvera:dim_proj={min(16, width)} or less.")  # fmt: skip

    def __str__(self) -> str:
        changed = [f"{k}={getattr(self, k)}" for k in ("k_sim", "dim_proj", "r_reps", "seed")
                   if getattr(self, k) != getattr(MUVERA_DEFAULTS, k)]  # fmt: skip
        return "muvera" + (":" + ",".join(changed) if changed else "")


MUVERA_DEFAULTS = MuveraOptions()


@lru_cache(maxsize=8)
def _draws(options: MuveraOptions, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(planes (r, dim, k), projections (r, dim, p))`` float64, in fastembed's draw order."""
    rng = np.random.default_rng(options.seed)
    planes = np.stack([rng.normal(size=(dim, options.k_sim)) for _ in range(options.r_reps)])
    proj = rng.choice([-1, 1], size=(options.r_reps, dim, options.dim_proj)).astype(np.float64)
    return planes, proj


def muvera_encode(vectors: np.ndarray, options: MuveraOptions, *, query: bool) -> np.ndarray:
    """One text's token vectors ``(n, D)`` as its encoding ``(options.output_dim(),)``
    float32; ``query``: partitions summed, else averaged with empty ones filled."""
    x = np.asarray(vectors)
    if x.ndim != 2 or not len(x):
        value_error("vectors", "a non-empty (tokens, dims) array", f"shape {x.shape}")
    dim = x.shape[1]
    options.check_width(dim)
    planes, proj = _draws(options, dim)
    parts = 1 << options.k_sim
    bits = 1 << np.arange(options.k_sim)
    out = []
    for rep in range(options.r_reps):
        ids = (x @ planes[rep] > 0) @ bits  # (n,) partition of each token
        centers = np.zeros((parts, dim))
        np.add.at(centers, ids, x)  # in token order, as a loop adds them
        if not query:
            counts = np.bincount(ids, minlength=parts)
            full = counts > 0
            centers[full] /= counts[full][:, None]
            empty = np.flatnonzero(~full)
            if len(empty):
                occupied = np.flatnonzero(full)
                xor = (empty[:, None] ^ occupied[None, :]).astype(">u4").view(np.uint8)
                hamming = np.unpackbits(xor.reshape(len(empty), -1, 4), axis=-1).sum(-1)
                nearest = occupied[np.argmin(hamming, axis=1)]
                seen, first = np.unique(ids, return_index=True)  # first token of each
                centers[empty] = x[first[np.searchsorted(seen, nearest)]]
        if options.dim_proj < dim:
            centers = (1 / np.sqrt(options.dim_proj)) * (centers @ proj[rep])
        out.append(centers.reshape(-1))
    return np.concatenate(out).astype(np.float32)
