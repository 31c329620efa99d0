"""Learned sparse vectors (SPLADE): the ``sparse`` recipe level.

A sparse recipe (``splade``, ``splade_sum``, ``splade_log1p``, ``splade_sum_log1p``, each
with an optional ``/topK``) turns a text into one weight per vocabulary term, read from the
model's masked-LM head: see :mod:`poolkit.sparse.names` for the formulas. The core
(:mod:`poolkit.sparse.pooling`) is pure; :func:`embed_sparse` runs it over an encoder.
"""

from typing import Any

from poolkit.sparse.mlm import NoMLMHeadError
from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = ["SPARSE_STRATEGIES", "NoMLMHeadError", "canonical_csr", "decode", "embed_sparse"]


def __getattr__(name: str) -> Any:
    # recipe.py imports this package for the names; the embedding path loads on use.
    if name in ("canonical_csr", "decode", "embed_sparse"):
        from poolkit.sparse import embed

        return getattr(embed, name)
    raise AttributeError(name)
