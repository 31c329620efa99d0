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

Two executions of these rules give the same results: per row over each row's real
segment (NumPy, and CPU tensors without grad: the fastest for inference), and
vectorised over the whole batch (the dense path: tensors that need a gradient, live
on an accelerator or are bfloat16), a fixed number of tensor operations whatever ``B``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Literal

import numpy as np

import poolkit._arrays as ax
from poolkit._arrays import Array, dense_path  # a name here: tests pin the path
from poolkit._errors import short_list, value_error
from poolkit._names import SEQUENCE_STRATEGIES
from poolkit._plan import RowPlan, plan_rows, row_bounds
from poolkit.errors import InputError
from poolkit.poolings import user_pooling

Empty = Literal["raise", "zeros"]
Check = bool | Literal["async", "full"]


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
    unknown = [n for n in names if n not in SEQUENCE_STRATEGIES and user_pooling(n) is None]
    if unknown or not names:
        value_error(
            "strategy",
            f"one of {', '.join(SEQUENCE_STRATEGIES)} or a registered pooling (join several "
            "with '+')",
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
    check: Check = True,
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
        check: the data checks (0/1 masks, empty rows, NaN/inf) of the vectorised path
            (tensors that need a gradient, live on an accelerator or are bfloat16):
            ``True``/``"async"`` (default), ``"full"`` or ``False`` (empty rows give
            zeros), as :mod:`poolkit.nn` describes. NumPy input and CPU tensors without
            gradient are always checked exactly: their checks run on the host.

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
        exclude_special=exclude_special, empty=empty, check=check,
    )  # fmt: skip


def pool_named(
    hidden: Array,
    mask: Any,
    names: tuple[str, ...],
    *,
    special_tokens_mask: Any = None,
    exclude_special: bool = False,
    empty: Empty = "raise",
    check: Check = True,
    dense: bool = False,
) -> Array:
    """:func:`sequence_embedding` for strategy names validated already (a
    :class:`poolkit.Recipe`'s parts): the strategy is not parsed again per batch.
    ``dense``: the vectorised torch path whatever the tensor (callers with ``check=False``)."""
    mode = ax.check_mode(check)
    if dense or dense_path(hidden):  # torch only; _dense checks the dtype itself
        return _dense(hidden, mask, names, special_tokens_mask, exclude_special, empty, mode)
    ax.float_hidden(hidden)
    (hidden,), restore = ax.cpu_fast_path(hidden)
    xp, out_dtype = ax.float_hidden(hidden)
    h, lead = _check_args(hidden, empty, exclude_special, special_tokens_mask)
    b, length, _ = h.shape
    real = (
        np.ones((b, length), bool) if mask is None else ax.host_mask(mask, lead).reshape(b, length)
    )
    real_plan = selected_plan = plan_rows(real)
    if exclude_special:
        special = ax.host_mask(special_tokens_mask, lead, "special_tokens_mask").reshape(b, length)
        selected_plan = plan_rows(real & ~special)
    if b == 0:
        out = xp.zeros((0, hidden.shape[-1] * len(names)), dtype=out_dtype, device=ax.device_of(h))
        return restore(out)
    parts = []
    for name in names:
        plan = real_plan if name == "cls" else selected_plan
        _check_empty(plan, empty, exclude_special and name != "cls")
        rule = _STRATEGIES.get(name) or _user_rule(name)
        parts.append(rule(xp, h, plan, out_dtype))
    out = parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1)
    ax.check_finite(xp, out)
    return restore(out if hidden.ndim == 3 else out[0])


def _check_args(
    hidden: Array, empty: Any, exclude_special: bool, special: Any
) -> tuple[Array, tuple[int, ...]]:
    """The arguments both paths check first; ``hidden`` as ``(B, L, H)`` and its masks'
    shape."""
    h = ax.batch_view(hidden)
    if empty not in ("raise", "zeros"):
        value_error("empty", "'raise' or 'zeros'", repr(empty))
    if exclude_special and special is None:
        value_error(
            "special_tokens_mask",
            "given when exclude_special=True",
            "None",
            "Pass return_special_tokens_mask=True to the tokenizer and hand the mask over.",
        )
    return h, tuple(hidden.shape[:-1])


def _dense(
    hidden: Any,
    mask: Any,
    names: tuple[str, ...],
    special_tokens_mask: Any,
    exclude_special: bool,
    empty: Empty,
    mode: str | None,
) -> Any:
    """:func:`pool_named` on the vectorised torch path: every rule is a masked whole-batch
    operation, a fixed number of tensor operations whatever ``B``, on ``hidden``'s device.
    ``mode`` (:func:`poolkit._arrays.check_mode`): the data checks (0/1 masks, empty rows,
    NaN/inf) never wait for the device (``"async"``), are read back once for the exact
    error (``"full"``), or are skipped (``None``: empty rows give zeros)."""
    import torch

    if not hidden.dtype.is_floating_point:
        ax.not_float(hidden)
    h, lead = _check_args(hidden, empty, exclude_special, special_tokens_mask)
    dtype = ax.result_dtype(hidden)
    b, length, hid = h.shape
    checks = ax.Checks(mode) if mode else None
    if mask is None:
        real = torch.ones((b, length), dtype=torch.bool, device=h.device)
    else:
        real = ax.device_mask(mask, lead, h, "mask", checks).reshape(b, length)
    selected = real
    if exclude_special:
        special = ax.device_mask(special_tokens_mask, lead, h, "special_tokens_mask", checks)
        selected = real & ~special.reshape(b, length)
    # Rows left empty raise when checked (empty="raise"), so the rules need not zero them.
    zero_empty = checks is None or empty == "zeros"
    rows = {False: _Rows(real, dtype, zero_empty)}
    if exclude_special:
        rows[True] = _Rows(selected, dtype, zero_empty)
    parts = []
    for name in names:
        kept = rows[exclude_special and name != "cls"]
        if name not in _DENSE:  # a user pooling: its own width, zeros for empty rows
            parts.append(_user(name)(h, kept.keep, check=mode is not None))
        elif length == 0:
            parts.append(torch.zeros((b, hid), dtype=dtype, device=h.device))
        else:
            parts.append(_DENSE[name](h, kept))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    if checks is not None:
        if empty == "raise":
            for dropped, kept in rows.items():
                checks.add(
                    kept.nonempty(),
                    lambda keep=kept.keep, dropped=dropped: _check_empty(
                        plan_rows(ax.to_host(keep, "mask")), "raise", dropped
                    ),
                    "a row of `mask` has no real token"
                    + (" left after dropping special tokens" if dropped else ""),
                )
        ax.finite_check(checks, out)
        checks.run()
    return out if hidden.ndim == 3 else out[0]


def _check_empty(plan: RowPlan, empty: Empty, special_dropped: bool) -> None:
    if empty == "zeros" or not plan.empty.any():
        return
    rows = np.flatnonzero(plan.empty).tolist()
    what = (
        "no real token left after dropping special tokens" if special_dropped else "no real token"
    )
    raise InputError(arg="mask", expected="a real token in every row (something to pool)",
                     got=f"row(s) {short_list(rows)} with {what} (all padding)",
                     fix="Remove those rows, or pass empty='zeros' to get zero vectors for "
                     "them.")  # fmt: skip


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
                rows.append(xp.zeros(h.shape[-1], dtype=dtype, device=ax.device_of(h)))
                continue
            lo, hi = int(plan.first[i]), int(plan.last[i]) + 1
            keep = ax.to_device(xp, plan.keep[i, lo:hi], h) if plan.holes[i] else None
            rows.append(reduce(xp, h[i, lo:hi, :], keep, count, dtype))
        return xp.stack(rows)

    return pooled


def _sum(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    if keep is not None:
        seg = xp.where(keep[:, None], seg, xp.zeros((), dtype=seg.dtype, device=ax.device_of(seg)))
    return xp.sum(seg, axis=-2, dtype=dtype)


def _mean(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    return _sum(xp, seg, keep, count, dtype) / count


def _mean_sqrt_len(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    return _sum(xp, seg, keep, count, dtype) / math.sqrt(count)


def _weighted_mean(xp: Any, seg: Array, keep: Array | None, count: int, dtype: Any) -> Array:
    n = seg.shape[-2]
    if keep is None:
        weights = xp.arange(1, n + 1, dtype=dtype, device=ax.device_of(seg))
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
                keep[:, None], seg, xp.full((), fill, dtype=seg.dtype, device=ax.device_of(seg))
            )
        out = xp.max(seg, axis=-2) if pick == "max" else xp.min(seg, axis=-2)
        return xp.astype(out, dtype)

    return reduce


def _at(which: str) -> Callable[[Any, Array, RowPlan, Any], Array]:
    """Gather one token per row: the first or the last selected one."""

    def pooled(xp: Any, h: Array, plan: RowPlan, dtype: Any) -> Array:
        b, length, hid = h.shape
        if length == 0:  # only reachable with empty="zeros": every row is empty
            return xp.zeros((b, hid), dtype=dtype, device=ax.device_of(h))
        pos = np.where(plan.empty, 0, plan.first if which == "first" else plan.last)
        flat_index = ax.to_device(xp, np.arange(b) * length + pos, h)
        out = xp.astype(xp.take(xp.reshape(h, (b * length, hid)), flat_index, axis=0), dtype)
        if plan.empty.any():
            keep = ax.to_device(xp, ~plan.empty, h)
            out = xp.where(keep[:, None], out, xp.zeros((), dtype=dtype, device=ax.device_of(h)))
        return out

    return pooled


def _user(name: str) -> Any:
    """The user pooling ``name`` (:mod:`poolkit.poolings`); a ValueError if there is none."""
    found = user_pooling(name)
    if found is None:
        value_error("strategy", "a built-in strategy or a registered pooling", repr(name))
    return found


def _user_rule(name: str) -> Callable[[Any, Array, RowPlan, Any], Array]:
    """A user pooling as a per-batch rule of the host path: called once on the whole batch
    as torch (NumPy input: zero-copy views, the result back as NumPy)."""
    pooling = _user(name)

    def pooled(xp: Any, h: Array, plan: RowPlan, dtype: Any) -> Array:
        import torch

        numpy = isinstance(h, np.ndarray)
        hidden = torch.from_numpy(h) if numpy else h
        keep = torch.from_numpy(plan.keep) if numpy else ax.to_device(xp, plan.keep, h)
        with torch.no_grad():
            out = pooling(hidden, keep)
        return out.numpy() if numpy else out

    return pooled


# The vectorised rules: (B, L, H) hidden and a ``_Rows`` of the kept positions -> (B, H).
# Positions outside ``keep`` are replaced (``where``), never multiplied by zero, so NaN
# or inf in padding cannot reach a result, and they receive zero gradient.


class _Rows:
    """A ``(B, L)`` bool ``keep`` mask and the per-row quantities the rules share (each
    computed once per call). ``zero_empty``: rows without a kept token must give zeros;
    when False they raise after the call, so the rules skip the zeroing."""

    def __init__(self, keep: Any, dtype: Any, zero_empty: bool) -> None:
        self.keep, self.dtype, self.zero_empty = keep, dtype, zero_empty
        self._cache: dict[str, Any] = {}

    def _get(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def count(self) -> Any:
        """``(B,)`` kept tokens per row, in the result dtype."""
        return self._get("count", lambda: self.keep.sum(dim=1, dtype=self.dtype))

    def divisor(self) -> Any:
        """``(B, 1)`` count to divide by; 1 for empty rows when they must give zeros."""
        count = self.count()
        return (count.clamp(min=1) if self.zero_empty else count)[:, None]

    def any(self) -> Any:
        return self._get("any", lambda: self.keep.any(dim=1))

    def bounds(self) -> tuple[Any, Any, Any]:
        return self._get("bounds", lambda: row_bounds(self.keep))

    def nonempty(self) -> Any:
        """0-d bool: every row keeps a token (from whatever the rules computed already)."""
        for key in ("count", "any"):
            if key in self._cache:
                return self._cache[key].all()
        if "bounds" in self._cache:
            return self._cache["bounds"][2].all()
        return self.any().all()


def _masked(h: Any, keep: Any, fill: float = 0.0) -> Any:
    import torch

    return torch.where(keep[..., None], h, torch.full((), fill, dtype=h.dtype, device=h.device))


def _dense_sum(h: Any, rows: _Rows) -> Any:
    return _masked(h, rows.keep).sum(dim=1, dtype=rows.dtype)


def _dense_mean(h: Any, rows: _Rows) -> Any:
    return _dense_sum(h, rows) / rows.divisor()


def _dense_mean_sqrt_len(h: Any, rows: _Rows) -> Any:
    return _dense_sum(h, rows) / rows.divisor().sqrt()


def _dense_weighted_mean(h: Any, rows: _Rows) -> Any:
    import torch

    k = rows.keep.to(rows.dtype)
    weights = torch.cumsum(k, dim=1) * k  # rank counted from the row's first kept token
    n = rows.divisor()
    total = n * (n + 1) / 2
    return torch.bmm(weights[:, None, :], _masked(h, rows.keep).to(rows.dtype))[:, 0] / total


def _dense_extreme(pick: str) -> Callable[[Any, _Rows], Any]:
    def pooled(h: Any, rows: _Rows) -> Any:
        import torch

        info = torch.finfo(h.dtype)
        # the dtype's own limit, never a -1e9 that overflows in float16
        seg = _masked(h, rows.keep, info.min if pick == "max" else info.max)
        # max/min with indices, not amax/amin: the backward scatters into one position
        # per column instead of comparing the whole input again (2x faster fwd+bwd); on
        # exact ties the gradient goes to one of the tied tokens rather than split evenly
        out = (seg.max(dim=1) if pick == "max" else seg.min(dim=1)).values.to(rows.dtype)
        return torch.where(rows.any()[:, None], out, 0.0) if rows.zero_empty else out

    return pooled


def _dense_at(which: str) -> Callable[[Any, _Rows], Any]:
    def pooled(h: Any, rows: _Rows) -> Any:
        import torch

        first, last, count = rows.bounds()
        pos = (first if which == "first" else last).clamp(0, h.shape[1] - 1)
        out = torch.gather(h, 1, pos[:, None, None].expand(-1, 1, h.shape[2]))[:, 0]
        out = out.to(rows.dtype)
        return torch.where((count > 0)[:, None], out, 0.0) if rows.zero_empty else out

    return pooled


_DENSE: dict[str, Callable[[Any, _Rows], Any]] = {
    "cls": _dense_at("first"),
    "last": _dense_at("last"),
    "mean": _dense_mean,
    "sum": _dense_sum,
    "mean_sqrt_len": _dense_mean_sqrt_len,
    "weighted_mean": _dense_weighted_mean,
    "max": _dense_extreme("max"),
    "min": _dense_extreme("min"),
}


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
