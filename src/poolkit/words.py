"""Word level: sub-token vectors to one vector per word.

``word_ids`` is what a Hugging Face fast tokenizer's ``encoding.word_ids()`` gives: for
each token the index of the word it belongs to, ``None`` (or -1) for special and
padding tokens. A word's sub-tokens form the inclusive token span ``[first, last]``, so
every strategy is a span strategy and shares its implementation with ``spans.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import poolkit._arrays as ax
from poolkit._arrays import Array, dense_path  # a name here: tests pin the path
from poolkit._errors import short_list, type_error, value_error
from poolkit._plan import device_word_spans
from poolkit.errors import InputError
from poolkit.spans import span_embeddings, spans_dense

WORD_STRATEGIES: dict[str, str] = {
    "first": "x",
    "last": "y",
    "endpoints": "x,y",
    "mean": "mean",
    "max": "max",
}
"""Word strategy name -> the span strategy that implements it."""


def word_spans(word_ids: Any, length: int, num_words: int | None = None) -> np.ndarray:
    """Inclusive token span ``[first, last]`` of every word; ``[-1, -1]`` for a word with no
    sub-token. ``word_ids`` ``(L,)`` or ``(B, L)``; returns ``(W, 2)`` or ``(B, W, 2)`` int64.
    """
    ids = _host_word_ids(word_ids, length)
    batched = ids.ndim == 2
    ids2 = ids if batched else ids[None]
    b, n_tok = ids2.shape
    found = int(ids2.max()) + 1 if ids2.size else 0
    if num_words is None:
        num_words = found
    elif not isinstance(num_words, int) or num_words < found:
        value_error(
            "num_words",
            f"an int >= {found} (the largest word id + 1)",
            repr(num_words),
            "Leave it None to use the largest word id + 1.",
        )
    rows, pos = np.nonzero(ids2 >= 0)
    words = ids2[rows, pos]
    first = np.full((b, num_words), n_tok, np.int64)
    last = np.full((b, num_words), -1, np.int64)
    count = np.zeros((b, num_words), np.int64)
    np.minimum.at(first, (rows, words), pos)
    np.maximum.at(last, (rows, words), pos)
    np.add.at(count, (rows, words), 1)
    present = count > 0
    split = present & (last - first + 1 != count)
    if split.any():
        r, w = (int(i) for i in np.argwhere(split)[0])
        where = f"row {r}, word {w}" if batched else f"word {w}"
        raise InputError(arg="word_ids", expected="adjacent sub-tokens for each word",
                         got=f"those of {where} at positions "
                         f"{short_list(pos[(rows == r) & (words == w)].tolist())}",
                         fix="A word's sub-tokens must be one contiguous run, as fast "
                         "tokenizers produce them.")  # fmt: skip
    spans = np.where(present[..., None], np.stack([first, last], -1), -1)
    return spans if batched else spans[0]


def _host_word_ids(word_ids: Any, length: int) -> np.ndarray:
    if isinstance(word_ids, list | tuple):
        word_ids = _none_to_minus_one(word_ids)
    ids = ax.to_host(word_ids, "word_ids")
    _ids_form(ids, ids.dtype != object and np.issubdtype(ids.dtype, np.integer), length)
    if (ids < -1).any():
        value_error(
            "word_ids", "word indices >= 0, or -1/None for non-word tokens", f"value {ids.min()}"
        )
    return ids.astype(np.int64)


def _ids_form(ids: Any, integer: bool, length: int) -> None:
    """Refuse ``word_ids`` (NumPy or torch) not of ``integer`` dtype, or not ``(L,)`` or
    ``(B, L)`` for ``length`` tokens; from metadata only."""
    if not integer:
        type_error(
            "word_ids",
            "integers (-1 or None for special and padding tokens)",
            f"dtype {ax.dtype_name(ids)}",
            "Pass encoding.word_ids() lists, or an int array.",
        )
    if ids.ndim not in (1, 2) or ids.shape[-1] != length:
        value_error(
            "word_ids",
            f"of shape (L,) or (B, L) with L = {length} (one id per token of `hidden`)",
            f"shape {tuple(ids.shape)}",
        )


def _none_to_minus_one(seq: Any) -> Any:
    if isinstance(seq, list | tuple):
        return [_none_to_minus_one(x) for x in seq]
    return -1 if seq is None else seq


def word_embeddings(
    hidden: Array,
    word_ids: Any,
    strategy: str = "first",
    *,
    num_words: int | None = None,
    check: bool | str = True,
) -> Array:
    """Pool each word's sub-token vectors into one vector.

    Args:
        hidden: ``(L, H)`` or ``(B, L, H)`` float token vectors (NumPy or torch).
        word_ids: ``(L,)`` / ``(B, L)`` word index per token, ``None`` or -1 for special
            and padding tokens (a list of ``encoding.word_ids()`` lists works as is).
        strategy: ``first``, ``last``, ``mean``, ``max`` (H each) or ``endpoints`` (2H: first and last sub-token, as the span level's ``endpoints``).
        num_words: words per row in the output; default the largest word id + 1. Use it
            to keep words that truncation left without sub-tokens. On the vectorised
            path (tensors that need a gradient, live on an accelerator or are bfloat16)
            pass it to keep the call from reading the ids back: it sets the output shape.
        check: the data checks (word ids, adjacent sub-tokens, NaN/inf) of the vectorised
            path, as in ``span_embeddings``: ``True``/``"async"`` (default) never waits
            for the device, ``"full"`` reads the flags back once for the exact error,
            ``False`` skips them. NumPy input and CPU tensors without gradient are always
            checked exactly.

    Returns:
        ``(W, D)`` or ``(B, W, D)``, float32 (float64 for float64 input), the input's
        kind and device. A word with no sub-token (and the padding words of shorter rows
        in a batch) is a zero vector. A row with no word gives no rows, never an error.

    Example:
        >>> import numpy as np
        >>> h = np.arange(10, dtype=np.float32).reshape(5, 2)
        >>> word_embeddings(h, [None, 0, 0, 1, None], "mean").tolist()
        [[3.0, 4.0], [6.0, 7.0]]
    """
    if strategy not in WORD_STRATEGIES:
        value_error("strategy", f"one of {', '.join(WORD_STRATEGIES)}", repr(strategy))
    ax.float_hidden(hidden)
    ax.batch_view(hidden)
    mode = ax.check_mode(check)
    if dense_path(hidden):
        return words_dense(hidden, word_ids, strategy, num_words=num_words, check=mode or False)
    spans = word_spans(word_ids, hidden.shape[-2], num_words)
    if (spans.ndim == 3) != (hidden.ndim == 3) or (
        spans.ndim == 3 and spans.shape[0] != hidden.shape[0]
    ):
        value_error(
            "word_ids",
            "batched exactly like `hidden` ((L,) for (L, H), (B, L) for (B, L, H))",
            f"shape {np.shape(_host_word_ids(word_ids, hidden.shape[-2]))} for hidden {tuple(hidden.shape)}",
        )
    return span_embeddings(hidden, spans, WORD_STRATEGIES[strategy])


def words_dense(
    hidden: Any,
    word_ids: Any,
    strategy: str,
    *,
    num_words: int | None = None,
    check: bool | str = True,
) -> Any:
    """``word_embeddings`` on the vectorised torch path: word spans are planned on
    ``hidden``'s device (scatter min/max of token positions), then ``spans_dense``.

    Without ``num_words`` the output size is the largest word id + 1, which costs one
    host sync; pass ``num_words`` to avoid it (and to compile with ``fullgraph=True``).
    ``check`` as in ``word_embeddings`` (ids, adjacency, NaN/inf).
    """
    import torch

    length = ax.batch_view(hidden).shape[-2]
    if isinstance(word_ids, torch.Tensor):
        dt = word_ids.dtype
        _ids_form(word_ids, not (dt == torch.bool or dt.is_floating_point or dt.is_complex), length)
        ids = word_ids.to(device=hidden.device, dtype=torch.long)
    else:
        ids = torch.as_tensor(_host_word_ids(word_ids, length), device=hidden.device)
    if (ids.ndim == 2) != (hidden.ndim == 3) or (ids.ndim == 2 and ids.shape[0] != hidden.shape[0]):
        value_error(
            "word_ids",
            "batched exactly like `hidden` ((L,) for (L, H), (B, L) for (B, L, H))",
            f"shape {tuple(ids.shape)} for hidden {tuple(hidden.shape)}",
        )
    if num_words is not None and (not isinstance(num_words, int) or num_words < 0):
        value_error("num_words", "an int >= 0 or None", repr(num_words))
    ids2 = ids if ids.ndim == 2 else ids[None]
    if num_words is None:
        num_words = int(ids2.max()) + 1 if ids2.numel() else 0  # the one sync; see docstring
        num_words = max(num_words, 0)
    spans, valid = device_word_spans(ids2, num_words)
    mode = ax.check_mode(check)
    checks = ax.Checks(mode) if mode else None
    if checks is not None:
        checks.add(
            valid,
            lambda: word_spans(ax.to_host(ids, "word_ids"), length, num_words),
            "`word_ids` hold an id outside -1..num_words-1, or a word whose sub-tokens "
            "are not adjacent",
        )
    return spans_dense(
        hidden,
        spans if hidden.ndim == 3 else spans[0],
        tuple(WORD_STRATEGIES[strategy].split(",")),
        check=check,
        checks=checks,
    )
