"""Sparse vectors of texts: the encoder's batches, the MLM head, SPLADE pooling, CSR rows.

:func:`embed_sparse` is the one sparse path (:func:`poolkit.embed`, the CLI and
``compare`` call it); :func:`decode` turns a row back into readable terms.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from poolkit._errors import type_error, value_error
from poolkit.driver import EmbedStats, drive
from poolkit.encoder_cache import get_encoder
from poolkit.sparse.csr import canonical_csr
from poolkit.sparse.mlm import load_mlm_head
from poolkit.sparse.pooling import keep_top_k, slice_tokens_for, splade_pool

__all__ = ["canonical_csr", "decode", "embed_sparse", "mlm_head"]

# One head per Encoder, loaded on first use and dropped with it.
_HEADS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def mlm_head(encoder: Any, recipe: str = "splade") -> Any:
    """``encoder``'s MLM head (:func:`~poolkit.sparse.mlm.load_mlm_head`), loaded once."""
    if encoder not in _HEADS:
        import torch

        device = getattr(encoder.backend, "device", "cpu")
        dtype = getattr(encoder.backend, "dtype", None)
        _HEADS[encoder] = load_mlm_head(encoder.info.path, device=device,
                                        dtype=dtype if isinstance(dtype, torch.dtype) else None,
                                        reference=encoder.info.reference, recipe=recipe)  # fmt: skip
    return _HEADS[encoder]


def vocab_size(head: Any) -> int:
    """Output width of the MLM ``head`` (its vocabulary)."""
    from poolkit.sparse.split import SplitHead

    last = head.decoder if isinstance(head, SplitHead) else head[-1]
    if hasattr(last, "out_features"):
        return int(last.out_features)
    import torch

    param = next(head.parameters())
    hidden = next(m for m in head.modules() if hasattr(m, "in_features")).in_features
    with torch.inference_mode():
        return int(head(param.new_zeros((1, hidden))).shape[-1])


def embed_sparse(
    texts: Sequence[str],
    encoder: Any,
    recipes: Mapping[str, Any],
    *,
    long_text: str = "truncate",
    max_batch_tokens: int | None = None,
    progress: Callable[[int], None] | None = None,
    prompt: str | None = None,
    slice_tokens: int | None = None,
    side: str = "document",
) -> tuple[dict[str, Any], EmbedStats]:
    """Sparse vectors of checked ``texts`` for each sparse recipe, one forward pass for all.

    ``recipes``: ``{name: Recipe}`` of the sparse kind; ``prompt``: the text before each
    one (already resolved); ``slice_tokens``: real tokens whose logits are held at once
    (default: :func:`~poolkit.sparse.pooling.slice_tokens_for` 32 MiB); ``side``:
    ``"query"`` or ``"document"``, which matters only for an inference-free model
    (``encoder.info.query_route``), whose queries get the static weights
    (:func:`~poolkit.sparse.static.embed_static`, no forward pass). Returns
    ``({name: scipy.sparse.csr_array (N, V) float32}, stats)``, rows in input order,
    column indices sorted within a row, zeros never stored.
    """
    import scipy.sparse as sp
    import torch

    if side not in ("query", "document"):
        value_error("side", "'query' or 'document'", repr(side))
    if side == "query" and getattr(encoder.info, "query_route", None) is not None:
        from poolkit.sparse.static import embed_static

        out_static, stats_static = embed_static(list(texts), encoder, recipes, prompt=prompt,
                                                long_text=long_text)  # fmt: skip
        if progress is not None and len(texts):
            progress(len(texts))
        return out_static, stats_static

    first = next(iter(recipes.values()))
    head = mlm_head(encoder, str(first))
    width = vocab_size(head)
    step = slice_tokens or slice_tokens_for(width)
    parts: dict[str, list[Any]] = {name: [] for name in recipes}
    order: list[np.ndarray] = []

    def on_batch(batch: Any) -> None:
        hidden = batch.hidden
        if not isinstance(hidden, torch.Tensor):  # ONNX / OpenVINO give NumPy
            hidden = torch.from_numpy(np.asarray(hidden))
        param = next(head.parameters())
        hidden = hidden.to(param.device, param.dtype)
        mask = torch.from_numpy(np.asarray(batch.attention_mask) != 0).to(hidden.device)
        pooled: dict[str, Any] = {}
        with torch.inference_mode():
            for name, r in recipes.items():
                if r.strategy not in pooled:
                    pooled[r.strategy] = splade_pool(hidden, mask, head, r.strategy,
                                                     slice_tokens=step)  # fmt: skip
                dense = keep_top_k(pooled[r.strategy], r.top_k)
                parts[name].append(sp.csr_array(dense.cpu().numpy()))
        order.append(np.asarray(batch.indices))

    stats = drive(encoder, list(texts), on_batch, long_text=long_text,
                  max_batch_tokens=max_batch_tokens, progress=progress, prompt=prompt)  # fmt: skip
    if not order:
        out = {name: sp.csr_array((len(texts), width), dtype=np.float32) for name in recipes}
    else:  # the batches' rows stacked, back in input order
        back = np.argsort(np.concatenate(order), kind="stable")
        out = {name: canonical_csr(sp.vstack(p, format="csr")[back]) for name, p in parts.items()}
    stats.dims = dict.fromkeys(recipes, width)
    return out, stats


def decode(row: Any, model: Any = None, *, top_k: int | None = None) -> list[tuple[str, float]]:
    """A sparse vector as ``(token, weight)`` pairs, largest weight first.

    ``row``: one row (a ``(1, V)`` or ``(V,)`` scipy sparse array, e.g. ``vectors[[i]]``,
    or a dense ``(V,)`` array); ``model``: the model reference or :class:`poolkit.Encoder`
    whose vocabulary the columns index (default: the default model); ``top_k``: at most
    that many pairs. Ties keep the lower term id first.
    """
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        value_error("top_k", "None or a positive integer", repr(top_k))
    import scipy.sparse as sp

    if sp.issparse(row):
        if row.ndim == 2 and row.shape[0] != 1:
            value_error("row", "one row (shape (1, V))", f"shape {row.shape}",
                        "Index it as vectors[[i]].")  # fmt: skip
        coo = sp.coo_array(row.reshape(1, -1))
        ids, weights = coo.col if hasattr(coo, "col") else coo.coords[-1], coo.data
    else:
        dense = np.asarray(row)
        if dense.ndim != 1:
            type_error("row", "a sparse row or a (V,) array", f"an array of shape {dense.shape}")
        ids = np.flatnonzero(dense)
        weights = dense[ids]
    nz = np.asarray(weights) != 0
    ids, weights = np.asarray(ids)[nz].astype(np.int64), np.asarray(weights)[nz].astype(np.float32)
    keep = np.lexsort((ids, -weights))[:top_k]
    tokens = get_encoder(model).tokenizer.convert_ids_to_tokens(ids[keep].tolist())
    return [(t, float(w)) for t, w in zip(tokens, weights[keep], strict=True)]
