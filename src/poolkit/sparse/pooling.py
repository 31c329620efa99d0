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
    hidden: Any, mask: Any, project: Callable[[Any], Any], strategy: str, *, slice_tokens: int
) -> Any:
    """SPLADE vectors of one batch.

    Args:
        hidden: ``(B, L, H)`` torch tensor, the last layer.
        mask: ``(B, L)`` torch bool/int, 1 at the tokens to pool (real tokens, specials
            included, as the model's pipeline pools them).
        project: the MLM head, ``(T, H) -> (T, V)`` logits; a
            :class:`~poolkit.sparse.split.SplitHead` or a ``Linear`` runs in parts (see
            :func:`_split_pool`), anything else whole, slice by slice.
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
    from poolkit.sparse.split import SplitHead

    if isinstance(project, torch.nn.Linear):
        project = SplitHead(torch.nn.Identity(), project)
    if isinstance(project, SplitHead) and tokens.shape[0]:
        return _split_pool(tokens, bounds, project, pooling, activation, slice_tokens)
    out: Any = None
    for start in range(0, tokens.shape[0], slice_tokens):
        stop = min(start + slice_tokens, tokens.shape[0])
        logits = project(tokens[start:stop]).float()  # (t, V)
        if out is None:
            out = torch.zeros((hidden.shape[0], logits.shape[1]), dtype=torch.float32,
                              device=logits.device)  # fmt: skip
        if pooling == "sum":
            logits = activate(logits, activation)
        _reduce_into(out, logits, bounds, start, stop, pooling)
    if out is None:  # no token at all: the width is the head's
        width = project(hidden.new_zeros((1, hidden.shape[-1]))).shape[-1]
        return torch.zeros((hidden.shape[0], width), dtype=torch.float32, device=hidden.device)
    # max of act = act of max (act is non-decreasing, act(0) = 0 and `out` starts at 0):
    # one activation per row and term instead of one per token.
    return activate(out, activation) if pooling == "max" else out


def _split_pool(
    tokens: Any,
    bounds: list[int],
    head: Any,
    pooling: str,
    activation: str,
    slice_tokens: int,
) -> Any:
    """:func:`splade_pool` of ``tokens`` ``(T, H)`` (``T >= 1``) through a ``SplitHead``.

    The transform runs once over all tokens (``(T, H')``, small); the decoder's product
    runs slice by slice into one buffer allocated once, so no slice pays for fresh pages.
    For ``max`` the bias is added after the max (``max_t(x_t + b) = max_t(x_t) + b``, exact
    in floating point as rounding is monotone): one addition per row and term instead of
    one per token; ``sum`` needs it per token (the activation is not linear).
    """
    import torch

    weight, bias = head.decoder.weight, head.decoder.bias
    x = head.transform(tokens)  # (T, H')
    buf = torch.empty((min(slice_tokens, x.shape[0]), weight.shape[0]), dtype=x.dtype,
                      device=x.device)  # fmt: skip
    fill = float("-inf") if pooling == "max" else 0.0
    out = torch.full((len(bounds) - 1, weight.shape[0]), fill, dtype=torch.float32,
                     device=x.device)  # fmt: skip
    for start in range(0, x.shape[0], slice_tokens):
        stop = min(start + slice_tokens, x.shape[0])
        logits = buf[: stop - start]
        if pooling == "sum" and bias is not None:
            torch.addmm(bias, x[start:stop], weight.t(), out=logits)
        else:
            torch.mm(x[start:stop], weight.t(), out=logits)
        if pooling == "sum":
            logits = activate(logits.float(), activation)
        _reduce_into(out, logits, bounds, start, stop, pooling)
    if pooling == "sum":
        return out
    if bias is not None:
        out += bias.float()
    # A row without tokens stays -inf, which the activation's ReLU makes 0; max of act =
    # act of max (act is non-decreasing), so one activation per row and term.
    return activate(out, activation)


def _reduce_into(out: Any, logits: Any, bounds: list[int], start: int, stop: int,
                 pooling: str) -> None:  # fmt: skip
    """Fold ``logits`` ``(stop - start, V)`` (tokens ``start..stop``) into ``out`` ``(B, V)``
    by each row's max or sum."""
    import torch

    first = int(np.searchsorted(bounds, start, side="right")) - 1  # rows in [start, stop)
    last = int(np.searchsorted(bounds, stop, side="left"))
    for b in range(max(first, 0), min(last, len(bounds) - 1)):
        lo, hi = max(bounds[b], start), min(bounds[b + 1], stop)
        if lo >= hi:  # a row without tokens in this slice
            continue
        seg = logits[lo - start : hi - start]
        if pooling == "max":
            torch.maximum(out[b], seg.amax(dim=0).float(), out=out[b])
        else:
            out[b] += seg.sum(dim=0)


def keep_top_k(vectors: Any, k: int | None) -> Any:
    """``vectors`` ``(B, V)`` with all but each row's ``k`` largest weights zeroed
    (sentence-transformers' ``max_active_dims``); ``None`` keeps all."""
    import torch

    if k is None or k >= vectors.shape[1]:
        return vectors
    values, index = torch.topk(vectors, k=k, dim=1)
    return torch.zeros_like(vectors).scatter_(1, index, values)
