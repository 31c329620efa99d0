"""SPLADE pooling over real tokens only, in slices: the functional core of the sparse level.

The MLM logits of a batch are ``(B, L, V)``: 62 MB a 512-token text at BERT's 30522 terms,
so a batch of them is what caps memory. Here the head runs on the real tokens alone
(padding never reaches it), ``slice_tokens`` at a time, and each slice is reduced into the
``(B, V)`` result at once, so the logits held at any moment are ``(slice_tokens, V)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = ["activate", "keep_top_k", "slice_tokens_for", "splade_pool"]

SLICE_BYTES = 32 << 20  # the logits held at once: 32 MiB (262 tokens at BERT's vocabulary)


def slice_tokens_for(vocab_size: int, budget: int = SLICE_BYTES) -> int:
    """Tokens whose float32 logits fit in ``budget`` bytes (at least 1)."""
    return max(1, budget // (4 * max(1, int(vocab_size))))


def activate(x: Any, activation: str) -> Any:
    """``log1p(relu(x))`` (``"relu"``) or ``log1p(log1p(relu(x)))`` (``"log1p_relu"``),
    in place on ``x`` (a float torch tensor); returns it."""
    x = x.relu_().log1p_()
    return x.log1p_() if activation == "log1p_relu" else x


def splade_pool(
    hidden: Any,
    mask: Any,
    project: Callable[[Any], Any],
    strategy: str,
    *,
    slice_tokens: int,
) -> Any:
    """SPLADE vectors of one batch.

    Args:
        hidden: ``(B, L, H)`` torch tensor, the last layer.
        mask: ``(B, L)`` torch bool/int, 1 at the tokens to pool (real tokens, specials
            included, as the model's pipeline pools them).
        project: the MLM head, ``(T, H) -> (T, V)`` logits.
        strategy: a :data:`~poolkit.sparse.names.SPARSE_STRATEGIES` name.
        slice_tokens: real tokens projected at once.

    Returns:
        ``(B, V)`` float32 torch tensor, zeros for a row without tokens.
    """
    import torch

    pooling, activation = SPARSE_STRATEGIES[strategy]
    rows, cols = torch.nonzero(mask, as_tuple=True)  # row-major: each row's tokens adjacent
    tokens = hidden[rows, cols]  # (T, H)
    # Where each row's tokens start and end in `tokens`.
    counts = torch.bincount(rows, minlength=hidden.shape[0]).tolist()
    bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
    out: Any = None
    for start in range(0, tokens.shape[0], slice_tokens):
        stop = min(start + slice_tokens, tokens.shape[0])
        logits = project(tokens[start:stop]).float()  # (t, V)
        if out is None:
            out = torch.zeros((hidden.shape[0], logits.shape[1]), dtype=torch.float32,
                              device=logits.device)  # fmt: skip
        if pooling == "sum":
            logits = activate(logits, activation)
        for b in _rows_in(bounds, start, stop):
            lo, hi = max(bounds[b], start), min(bounds[b + 1], stop)
            if lo >= hi:  # a row without tokens in this slice
                continue
            seg = logits[lo - start : hi - start]
            if pooling == "max":
                torch.maximum(out[b], seg.amax(dim=0), out=out[b])
            else:
                out[b] += seg.sum(dim=0)
    if out is None:  # no token at all: the width is the head's
        width = project(hidden.new_zeros((1, hidden.shape[-1]))).shape[-1]
        return torch.zeros((hidden.shape[0], width), dtype=torch.float32, device=hidden.device)
    # max of act = act of max (act is non-decreasing, act(0) = 0 and `out` starts at 0):
    # one activation per row and term instead of one per token.
    return activate(out, activation) if pooling == "max" else out


def _rows_in(bounds: list[int], start: int, stop: int) -> range:
    """The rows whose tokens overlap ``[start, stop)`` (``bounds``: cumulative counts)."""
    first = int(np.searchsorted(bounds, start, side="right")) - 1
    last = int(np.searchsorted(bounds, stop, side="left"))
    return range(max(first, 0), min(last, len(bounds) - 1))


def keep_top_k(vectors: Any, k: int | None) -> Any:
    """``vectors`` ``(B, V)`` with all but each row's ``k`` largest weights zeroed
    (sentence-transformers' ``max_active_dims``); ``None`` keeps all."""
    import torch

    if k is None or k >= vectors.shape[1]:
        return vectors
    values, index = torch.topk(vectors, k=k, dim=1)
    return torch.zeros_like(vectors).scatter_(1, index, values)
