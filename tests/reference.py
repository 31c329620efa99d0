"""Obviously-correct references: plain Python loops over each row's real tokens, in
float64 NumPy. The library's vectorised code is tested against these."""

from __future__ import annotations

import numpy as np


def pool_row(tokens: np.ndarray, strategy: str) -> np.ndarray:
    """Pool one text's real tokens ``(n, H)`` (already sliced, float64)."""
    n = len(tokens)
    if strategy == "cls":
        return tokens[0]
    if strategy == "last":
        return tokens[-1]
    if strategy == "mean":
        return tokens.sum(0) / n
    if strategy == "sum":
        return tokens.sum(0)
    if strategy == "max":
        return tokens.max(0)
    if strategy == "min":
        return tokens.min(0)
    if strategy == "mean_sqrt_len":
        return tokens.sum(0) / np.sqrt(n)
    if strategy == "weighted_mean":
        w = np.arange(1, n + 1, dtype=np.float64)
        return (w[:, None] * tokens).sum(0) / w.sum()
    raise AssertionError(strategy)


def sequence_reference(
    hidden: np.ndarray,
    mask: np.ndarray,
    strategy: str,
    special: np.ndarray | None = None,
) -> np.ndarray:
    """Row by row: slice the real (and, with ``special``, non-special) tokens, pool them."""
    out = []
    for b in range(hidden.shape[0]):
        real = [i for i in range(hidden.shape[1]) if mask[b, i]]
        chosen = (
            real if special is None or strategy == "cls" else [i for i in real if not special[b, i]]
        )
        out.append(pool_row(hidden[b, chosen].astype(np.float64), strategy))
    return np.stack(out)


def span_reference(hidden: np.ndarray, start: int, end: int, strategy: str) -> np.ndarray:
    """One span of one text, ends inclusive, as the seed document writes it."""
    tokens = hidden[start : end + 1].astype(np.float64)
    x, y = tokens[0], tokens[-1]
    if strategy == "endpoints":
        return np.concatenate([x, y])
    if strategy == "diff_sum":
        return np.concatenate([y - x, y + x])
    if strategy == "mean":
        return tokens.mean(0)
    if strategy == "max":
        return tokens.max(0)
    if strategy == "x,y,x*y":
        return np.concatenate([x, y, x * y])
    if strategy == "x-y":
        return x - y
    raise AssertionError(strategy)


def softmax_pool(tokens: np.ndarray, logits: np.ndarray) -> np.ndarray:
    w = np.exp(logits - logits.max())
    return (w[:, None] * tokens).sum(0) / w.sum()
