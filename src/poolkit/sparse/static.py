"""The query side of an inference-free sparse model: one stored weight per vocabulary term.

A query's vector holds, for each distinct token id of the query (tokenized without special
tokens, a prompt first if any, cut at the tokenizer's ``model_max_length`` as
sentence-transformers' ``SparseStaticEmbedding`` cuts it, or at a ``max_length`` given),
that term's stored weight: a term counts once however often it occurs, and the weight is
used as stored (no ReLU, no log). No model runs. ``/topK`` keeps the ``K`` weights largest in magnitude, as
``max_active_dims`` does on both sides of the model.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from poolkit.driver import EmbedStats
from poolkit.errors import InputError
from poolkit.sparse.csr import canonical_csr

__all__ = ["StaticQueries", "embed_static", "load_static", "static_vectors", "top_k_by_magnitude"]


class StaticQueries:
    """A ``SparseStaticEmbedding`` folder, loaded: its tokenizer and its ``(V,)`` weights,
    zero-padded to ``width`` (the document side's vocabulary) when shorter."""

    def __init__(self, folder: Path, width: int) -> None:
        from poolkit.tokenizer import load_tokenizer

        safe, legacy = folder / "model.safetensors", folder / "pytorch_model.bin"
        if safe.is_file():
            from safetensors.numpy import load_file

            tensors = load_file(str(safe))
        elif legacy.is_file():
            import torch

            tensors = {k: v.float().numpy() for k, v in
                       torch.load(legacy, map_location="cpu", weights_only=True).items()}  # fmt: skip
        else:
            raise InputError(where=folder, expected="model.safetensors or pytorch_model.bin with "
                             "the query route's weights", got="neither is there",
                             fix="Save the model again with sentence-transformers.")  # fmt: skip
        weight = tensors.get("weight")
        if weight is None or np.ndim(weight) != 1:
            raise InputError(where=folder, expected="a 1-d 'weight' among the stored tensors",
                             got=f"got {', '.join(sorted(tensors)) or 'none'}")  # fmt: skip
        weight = np.asarray(weight, dtype=np.float32)
        if weight.shape[0] > width:
            raise InputError(where=folder, expected=f"query weights over the document route's "
                             f"vocabulary of {width} (the two sides share one)",
                             got=f"they cover {weight.shape[0]} terms",
                             fix="Save the model again with matching tokenizers.")  # fmt: skip
        self.weight = np.zeros(width, np.float32)
        self.weight[: weight.shape[0]] = weight
        self.tokenizer = load_tokenizer(folder)
        limit = self.tokenizer.model_max_length
        self.limit: int | None = limit if isinstance(limit, int) and 0 < limit < 1_000_000 else None


# One loaded query route per Encoder, dropped with it.
_LOADED: weakref.WeakKeyDictionary[Any, StaticQueries] = weakref.WeakKeyDictionary()


def load_static(encoder: Any) -> StaticQueries:
    """The query route of ``encoder``'s model (``encoder.info.query_route``), loaded once."""
    if encoder not in _LOADED:
        config = json.loads((Path(encoder.info.path) / "config.json").read_text(encoding="utf-8"))
        _LOADED[encoder] = StaticQueries(Path(encoder.info.query_route), int(config["vocab_size"]))
    return _LOADED[encoder]


def static_vectors(ids: Sequence[Sequence[int]], weight: np.ndarray) -> Any:
    """Per token-id list, the weights of its distinct ids: ``csr_array (len(ids), V)``
    float32 (``weight``: ``(V,)``), zeros not stored, indices sorted."""
    import scipy.sparse as sp

    rows = [np.unique(np.asarray(x, dtype=np.int64)) for x in ids]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    cols = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    data = weight[cols]
    return canonical_csr(sp.csr_array((data, cols, indptr), shape=(len(rows), weight.shape[0])))


def top_k_by_magnitude(matrix: Any, k: int | None) -> Any:
    """CSR ``matrix`` with each row's ``k`` weights largest in magnitude kept (ties: the
    lower term id); ``None`` keeps all."""
    if k is None:
        return matrix
    out = matrix.copy()
    for r in range(out.shape[0]):
        lo, hi = out.indptr[r], out.indptr[r + 1]
        if hi - lo > k:
            seg = out.data[lo:hi]
            drop = np.lexsort((out.indices[lo:hi], -np.abs(seg)))[k:]
            seg[drop] = 0
    return canonical_csr(out)


def embed_static(
    texts: Sequence[str],
    encoder: Any,
    recipes: Mapping[str, Any],
    *,
    prompt: str | None,
    long_text: str,
) -> tuple[dict[str, Any], Any]:
    """Query vectors of ``texts`` through ``encoder``'s static query route, per sparse
    recipe (only its ``/topK`` applies). Returns ``({name: csr_array (N, V)}, stats)``;
    ``long_text="window"`` keeps every token, ``"truncate"`` cuts at the tokenizer's
    ``model_max_length`` as sentence-transformers does, or at the ``max_length`` the
    encoder was given when it differs from the model's (counted in ``stats.truncated``)."""
    start = time.perf_counter()
    route = load_static(encoder)
    full = [prompt + t if prompt else t for t in texts]
    encoded = [e.ids for e in route.tokenizer.encode_batch(full, special_tokens=False)]
    limit = route.limit
    if encoder.max_length != encoder.info.max_length:  # a max_length the caller passed
        limit = encoder.max_length
    truncated: list[int] = []
    if long_text == "truncate" and limit is not None:
        truncated = [i for i, x in enumerate(encoded) if len(x) > limit]
        encoded = [x[:limit] for x in encoded]
    base = static_vectors(encoded, route.weight)
    out = {name: top_k_by_magnitude(base, r.top_k) for name, r in recipes.items()}
    stats = EmbedStats(num_texts=len(texts), num_tokens=sum(len(x) for x in encoded),
                       truncated=truncated, max_length=limit or 0,
                       seconds=time.perf_counter() - start,
                       dims=dict.fromkeys(recipes, int(route.weight.shape[0])))  # fmt: skip
    return out, stats
