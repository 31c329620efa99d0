"""Sequence level: one vector per text from its token vectors.

Strategies (``SEQUENCE_STRATEGIES``), each over the *real* tokens of a row only:

=================  ==========================================================
``cls``            the first real token (correct under left padding)
``mean``           average of the tokens, accumulated in float32 or wider
``max`` / ``min``  element-wise maximum / minimum
``sum``            sum of the tokens
``mean_sqrt_len``  sum divided by sqrt(number of tokens)
``weighted_mean``  weights 1..n counted from the row's first real token, so the
                   padding side never changes a result
``last``           the last real token (left or right padding)
=================  ==========================================================

``"cls+mean"`` (or ``"cls,mean"``, or ``["cls", "mean"]``) concatenates strategies in
the order given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from poolkit._arrays import (
    Array,
    check_finite,
    cpu_fast_path,
    device_of,
    float_hidden,
    host_mask,
    to_device,
)
from poolkit._errors import short_list, value_error
from poolkit._plan import RowPlan, plan_rows

SEQUENCE_STRATEGIES: tuple[str, ...] = (
    "cls",
    "mean",
    "max",
    "min",
    "sum",
    "mean_sqrt_len",
    "weighted_mean",
    "last",
)

Empty = Literal["raise", "zeros"]


def parse_sequence_strategy(strategy: str | Sequence[str]) -> tuple[str, ...]:
    """Split ``"cls+mean"``, ``"cls,mean"`` or ``["cls", "mean"]`` into validated names."""
    if isinstance(strategy, str):
        return _parse(strategy)
    if isinstance(strategy, Sequence) and strategy and all(isinstance(s, str) for s in strategy):
        return tuple(name for s in strategy for name in _parse(s))
    value_error(
        "strategy",
        f"a name or a non-empty list of names from {SEQUENCE_STRATEGIES}",
        repr(strategy),
    )


@lru_cache(maxsize=256)
def _parse(text: str) -> tuple[str, ...]:
    names = tuple(p.strip().lower() for p in text.replace(",", "+").split("+"))
    unknown = [n for n in names if n not in SEQUENCE_STRATEGIES]
    if unknown or not names:
        value_error(
            "strategy",
            f"one of {', '.join(SEQUENCE_STRATEGIES)} (join several with '+')",
            repr(text),
            f"Unknown: {short_list(unknown)}.",
        )
    return names


def sequence_embedding(
    hidden: Array,
    mask: Any = None,
    strategy: str | Sequence[str] = "mean",
    *,
    special_tokens_mask: Any = None,
    exclude_special: bool = False,
    empty: Empty = "raise",
) -> Array:
    """Pool token vectors into one vector per text.

    Args:
        hidden: ``(L, H)`` for one text or ``(B, L, H)`` for a padded batch; float16,
            bfloat16, float32 or float64; a NumPy array or a torch tensor (any device).
        mask: attention mask ``(L,)`` / ``(B, L)``, 1/True for real tokens, 0/False for
            padding (left, right or anywhere). ``None`` means every position is real.
        strategy: a name from ``SEQUENCE_STRATEGIES``, or several joined with ``+`` (or a
            list): their results are concatenated along the last axis.
        special_tokens_mask: same shape as ``mask``, 1/True for [CLS], [SEP] and the like.
        exclude_special: drop special tokens from every strategy except ``cls`` (which is
            the first real token by definition). Needs ``special_tokens_mask``.
        empty: what a row with no selected token gives: ``"raise"`` (default) raises a
            ``ValueError`` naming the row; ``"zeros"`` returns a zero vector for it.

    Returns:
        ``(D,)`` or ``(B, D)`` with ``D = H x number of strategies``; the input's kind and
        device; float32 (float64 for float64 input). Masked positions never influence a
        result and the input is never modified.

    Raises:
        ValueError: unknown strategy, mismatched shapes, an empty row (see ``empty``), or
            NaN/inf in real positions. TypeError: non-float ``hidden``, non-0/1 masks.

    Example:
        >>> import numpy as np
        >>> h = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
        >>> sequence_embedding(h, np.array([[1, 1, 0]]), "mean").tolist()
        [[2.0, 3.0, 4.0, 5.0]]
    """
    names = parse_sequence_strategy(strategy)
    return pool_named(
        hidden, mask, names, special_tokens_mask=special_tokens_mask,
        exclude_special=exclude_special, empty=empty,
    )  # fmt: skip


def pool_named(
    hidden: Array,
    mask: Any,
    names: tuple[str, ...],
    *,
    special_tokens_mask: Any = None,
    exclude_special: bool = False,
    empty: Empty = "raise",
) -> Array:
    """:func:`sequence_embedding` for strategy names validated already (a
    :class:`poolkit.Recipe`'s parts): the strategy is not parsed again per batch."""
    float_hidden(hidden)
    (hidden,), restore = cpu_fast_path(hidden)
    xp, out_dtype = float_hidden(hidden)
    if hidden.ndim not in (2, 3):
        value_error("hidden", "of shape (L, H) or (B, L, H)", f"shape {tuple(hidden.shape)}")
    if empty not in ("raise", "zeros"):
        value_error("empty", "'raise' or 'zeros'", repr(empty))
    batched = hidden.ndim == 3
    h = hidden if batched else hidden[None, ...]
    b, length, _ = h.shape
    lead = (b, length) if batched else (length,)
    real = np.ones((b, length), bool) if mask is None else host_mask(mask, lead).reshape(b, length)
    if exclude_special and special_tokens_mask is None:
        value_error(
            "special_tokens_mask",
            "given when exclude_special=True",
            "None",
            "Pass return_special_tokens_mask=True to the tokenizer and hand the mask over.",
        )
    real_plan = selected_plan = plan_rows(real)
    if exclude_special:
        special = host_mask(special_tokens_mask, lead, "special_tokens_mask").reshape(b, length)
        selected_plan = plan_rows(real & ~special)
    if b == 0:
        out = xp.zeros((0, hidden.shape[-1] * len(names)), dtype=out_dtype, device=device_of(h))
        return restore(out)
    parts = []
    for name in names:
        plan = real_plan if name == "cls" else selected_plan
        _check_empty(plan, empty, exclude_special and name != "cls")
        parts.append(_STRATEGIES[name](xp, h, plan, out_dtype))
    out = parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1)
    check_finite(xp, out)
    return restore(out if batched else out[0])


def _check_empty(plan: RowPlan, empty: Empty, special_dropped: bool) -> None:
    if empty == "zeros" or not plan.empty.any():
        return
    rows = np.flatnonzero(plan.empty).tolist()
    what = (
        "no real token left after dropping special tokens" if special_dropped else "no real token"
    )
    raise ValueError(
        f"Row(s) {short_list(rows)} of `mask` have {what} (all padding), so there is nothing to "
        "pool. Remove those rows, or pass empty='zeros' to get zero vectors for them."
    )


Reducer = Callable[[Any, Array, Array | None, int, Any], Array]


def _by_rows(reduce: Reducer) -> Callable[[Any, Array, RowPlan, Any], Array]:
    """Apply ``reduce(xp, segment, keep, count, dtype)`` to each row's real segment.

    ``segment`` is ``(..., n, H)``: the slice from the row's first to last selected token,
    so padding outside it is never read. ``keep`` is ``(n,)`` bool on the device when the
    segment has holes, else None. Rows sharing one segment run in a single call.
    """

    def pooled(xp: Any, h: Array, plan: RowPlan, dtype: Any) -> Array:
        if plan.uniform:
            seg = h[:, int(plan.first[0]) : int(plan.last[0]) + 1, :]
            return reduce(xp, seg, None, int(plan.count[0]), dtype)
        rows = []
        for i in range(h.shape[0]):
            count = int(plan.count[i])
            if count == 0:
                rows.append(xp.zeros(h.shape[-1], dtype=dtype, device=device_of(h)))
                continue
            lo, hi = int(plan.first[i]), int(plan.last[i]) + 1
            keep = to_device(xp, plan.keep[i, lo:hi], h) if plan.holes[i] else None
            rows.append(reduce(xp, h[i, lo:hi, :], keep, count, dtype))
        return xp.stack(rows)

    return pooled


def _sum(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    if keep is not None:
        seg = xp.where(keep[:, None], seg, xp.zeros((), dtype=seg.dtype, device=device_of(seg)))
    return xp.sum(seg, axis=-2, dtype=dtype)


def _mean(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    return _sum(xp, seg, keep, count, dtype) / count


def _mean_sqrt_len(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    return _sum(xp, seg, keep, count, dtype) / math.sqrt(count)


def _weighted_mean(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    n = seg.shape[-2]
    if keep is None:
        weights = xp.arange(1, n + 1, dtype=dtype, device=device_of(seg))
    else:
        # rank among the kept tokens, so dropped tokens do not shift the weights
        k = xp.astype(keep, dtype)
        weights = xp.cumulative_sum(k) * k
    total = count * (count + 1) / 2
    return xp.matmul(weights, xp.astype(seg, dtype)) / total


def _extreme(pick: str) -> Reducer:
    def reduce(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
        if keep is not None:
            info = xp.finfo(seg.dtype)
            # the dtype's own limit, never a -1e9 that overflows in float16
            fill = info.min if pick == "max" else info.max
            seg = xp.where(
                keep[:, None], seg, xp.full((), fill, dtype=seg.dtype, device=device_of(seg))
            )
        out = xp.max(seg, axis=-2) if pick == "max" else xp.min(seg, axis=-2)
        return xp.astype(out, dtype)

    return reduce


def _at(which: str) -> Callable[[Any, Array, RowPlan, Any], Array]:
    """Gather one token per row: the first or the last selected one."""

    def pooled(xp: Any, h: Array, plan: RowPlan, dtype: Any) -> Array:
        b, length, hid = h.shape
        if length == 0:  # only reachable with empty="zeros": every row is empty
            return xp.zeros((b, hid), dtype=dtype, device=device_of(h))
        pos = np.where(plan.empty, 0, plan.first if which == "first" else plan.last)
        flat_index = to_device(xp, np.arange(b) * length + pos, h)
        out = xp.astype(xp.take(xp.reshape(h, (b * length, hid)), flat_index, axis=0), dtype)
        if plan.empty.any():
            keep = to_device(xp, ~plan.empty, h)
            out = xp.where(keep[:, None], out, xp.zeros((), dtype=dtype, device=device_of(h)))
        return out

    return pooled


_STRATEGIES: dict[str, Callable[[Any, Array, RowPlan, Any], Array]] = {
    "cls": _at("first"),
    "last": _at("last"),
    "mean": _by_rows(_mean),
    "sum": _by_rows(_sum),
    "mean_sqrt_len": _by_rows(_mean_sqrt_len),
    "weighted_mean": _by_rows(_weighted_mean),
    "max": _by_rows(_extreme("max")),
    "min": _by_rows(_extreme("min")),
}
