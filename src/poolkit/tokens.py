"""Token level: every real token's vector, special tokens and padding removed."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from poolkit._arrays import Array, batch_view, float_hidden, host_mask, to_device, to_host
from poolkit._errors import value_error


def _keep(hidden: Array, special_tokens_mask: Any, mask: Any) -> np.ndarray:
    """``(B, L)`` bool: real and not special."""
    b, length, _ = batch_view(hidden).shape
    lead = tuple(hidden.shape[:-1])
    keep = np.ones((b, length), bool)
    if mask is not None:
        keep &= host_mask(mask, lead).reshape(b, length)
    if special_tokens_mask is not None:
        keep &= ~host_mask(special_tokens_mask, lead, "special_tokens_mask").reshape(b, length)
    return keep


def flat_token_embeddings(
    hidden: Array, special_tokens_mask: Any = None, mask: Any = None
) -> tuple[Array, np.ndarray, np.ndarray]:
    """All kept token vectors of a batch, flat, with where each came from.

    Args:
        hidden: ``(L, H)`` or ``(B, L, H)`` float token vectors (NumPy or torch).
        special_tokens_mask: ``(L,)`` / ``(B, L)``, 1/True for special tokens (dropped).
        mask: attention mask of the same shape, 0/False for padding (dropped).

    Returns:
        ``(vectors, rows, positions)``: ``(N, H)`` vectors in row-major order (float32, or
        float64 for float64 input; the input's kind and device), and two ``(N,)`` int64
        NumPy arrays: the row of each vector (0 for unbatched input) and its token
        position in that row. Padding-only rows contribute nothing.
    """
    xp, out_dtype = float_hidden(hidden)
    keep = _keep(hidden, special_tokens_mask, mask)
    rows, positions = np.nonzero(keep)
    length, hid = keep.shape[1], hidden.shape[-1]
    flat = xp.reshape(hidden, (-1, hid))
    vectors = xp.astype(
        xp.take(flat, to_device(xp, rows * length + positions, hidden), axis=0), out_dtype
    )
    if not bool(xp.all(xp.isfinite(vectors))):
        bad = int(np.flatnonzero(~to_host(xp.all(xp.isfinite(vectors), axis=-1), "hidden"))[0])
        value_error(
            "hidden",
            "finite at the tokens it keeps",
            f"NaN or inf at row {rows[bad]}, position {positions[bad]}",
            "Check the encoder's output (fp16 overflow is a common cause) or mask that token.",
        )
    return vectors, rows.astype(np.int64), positions.astype(np.int64)


def token_embeddings(
    hidden: Array, special_tokens_mask: Any = None, mask: Any = None
) -> Array | list[Array]:
    """The seed's token-level representation: special and padding tokens removed.

    Args:
        hidden: ``(L, H)`` or ``(B, L, H)`` float token vectors (NumPy or torch).
        special_tokens_mask: ``(L,)`` / ``(B, L)``, 1/True for [CLS], [SEP], ... (dropped).
        mask: attention mask of the same shape, 0/False for padding (dropped).

    Returns:
        For ``(L, H)``: an ``(n, H)`` array. For ``(B, L, H)``: a list of ``B`` arrays
        ``(n_i, H)``; a padding-only row gives ``(0, H)``. float32 (float64 for float64
        input), the input's kind and device. See ``flat_token_embeddings`` for one flat
        array with row indices, e.g. to train a token classifier.

    Example:
        >>> import numpy as np
        >>> h = np.zeros((8, 256), np.float32)
        >>> special = np.array([1, 0, 0, 0, 0, 0, 0, 1], bool)
        >>> token_embeddings(h, special).shape
        (6, 256)
    """
    vectors, rows, _ = flat_token_embeddings(hidden, special_tokens_mask, mask)
    if hidden.ndim == 2:
        return vectors
    bounds = np.searchsorted(rows, np.arange(hidden.shape[0] + 1))
    return [vectors[int(a) : int(c)] for a, c in itertools.pairwise(bounds)]
