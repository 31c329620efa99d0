"""Span level: one vector per ``[start, end]`` token span (ends **inclusive**).

Strategies, combined with commas (``"endpoints,mean"``) or given as a list:

==============  ==================================================================
``endpoints``   ``[h_start; h_end]`` (2H), as in the seed document
``mean``        average of the span's tokens
``max``         element-wise maximum over the span's tokens
``attention``   softmax over per-token ``scores`` inside the span, weighted sum.
                Without ``scores``: each token is scored by its scaled dot product
                with the span's mean vector, ``h_t . mean / sqrt(H)`` (parameter-free)
``diff_sum``    ``[h_end - h_start; h_end + h_start]`` (2H)
``x``, ``y``    the start / end token vector (H each)
``x-y`` ...     element-wise ``-``, ``+``, ``*``, ``/`` of the two endpoint vectors
==============  ==================================================================

On the per-row path spans are reduced offset by offset (token ``start + k`` for every
span at once, the widest spans first), so memory stays ``O(S x H)`` whatever the widths:
there is never a ``(B, S, L, H)`` intermediate. Tensors that need a gradient, live on an
accelerator or are bfloat16 take the vectorised path instead (``spans_dense``): a fixed
number of whole-batch operations, see docs/DESIGN.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

import poolkit._arrays as ax
from poolkit._arrays import Array, dense_path  # a name here: tests pin the path
from poolkit._errors import type_error, value_error
from poolkit._plan import spans_valid
from poolkit.errors import InputError

SPAN_STRATEGIES: tuple[str, ...] = ("endpoints", "mean", "max", "attention", "diff_sum")
_ALIASES = {"endpoints": ("x", "y"), "diff_sum": ("y-x", "y+x")}
_OPS = "-+*/"
LOG_WIDTH_BUCKETS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 9, 17, 33, 65)
"""Lower bounds of the log-spaced width buckets: widths 1, 2, 3, 4, 5, 6-8, 9-16, 17-32,
33-64 and 65+ (the (width - 1) buckets 0..4, 5-7, 8-15, ... of Lee et al. 2017)."""


def parse_span_strategy(strategy: str | Sequence[str]) -> tuple[str, ...]:
    """Split a span strategy into validated terms (``"x,y,x*y"`` -> ``("x", "y", "x*y")``)."""
    if isinstance(strategy, str):
        return _parse(strategy)
    if isinstance(strategy, Sequence) and strategy and all(isinstance(s, str) for s in strategy):
        return tuple(t for s in strategy for t in _parse(s))
    value_error("strategy", "a span strategy name or a non-empty list of them", repr(strategy))


@lru_cache(maxsize=256)
def _parse(text: str) -> tuple[str, ...]:
    terms: list[str] = []
    for raw in text.split(","):
        term = raw.strip().lower().replace(" ", "")
        if term in _ALIASES:
            terms.extend(_ALIASES[term])
        elif term in SPAN_STRATEGIES or term in ("x", "y"):
            terms.append(term)
        elif len(term) == 3 and term[0] in "xy" and term[1] in _OPS and term[2] in "xy":
            terms.append(term)
        else:
            value_error(
                "strategy",
                f"comma-joined terms from {', '.join(SPAN_STRATEGIES)}, x, y, or 'a?b' with a, b "
                f"in x/y and ? in {' '.join(_OPS)} (x = start token, y = end token)",
                repr(text),
                f"Unknown term {raw.strip()!r}.",
            )
    return tuple(terms)


def span_output_dim(
    hidden_size: int, strategy: str | Sequence[str], width_buckets: Any = None
) -> int:
    """Size of the last axis ``span_embeddings`` returns for these settings."""
    width = 0 if width_buckets is None else len(_bucket_bounds(width_buckets))
    return hidden_size * len(parse_span_strategy(strategy)) + width


@dataclass(frozen=True)
class SpanPlan:
    """Valid spans in flattened form, sorted widest first. Host arrays, shape ``(V,)``.

    ``slot`` is each valid span's index in the flat ``(B * S)`` output, ``base`` the
    flat index of its start token in ``(B * L, H)``, ``width`` its token count.
    """

    slot: np.ndarray
    base: np.ndarray
    width: np.ndarray
    active: np.ndarray  # active[k] = number of spans wider than k


def span_embeddings(
    hidden: Array,
    spans: Any,
    strategy: str | Sequence[str] = "endpoints",
    *,
    mask: Any = None,
    span_mask: Any = None,
    scores: Array | None = None,
    width_buckets: Any = None,
    check: bool | str = True,
) -> Array:
    """Represent token spans ``[start, end]`` (both ends **inclusive**).

    Args:
        hidden: ``(L, H)`` or ``(B, L, H)`` float token vectors (NumPy or torch).
        spans: ``(S, 2)`` for unbatched ``hidden`` or ``(B, S, 2)``, integer token indices,
            inclusive ``[start, end]``. A row of ``-1`` marks a padded span.
        strategy: see the module docstring; comma-joined terms are concatenated.
        mask: attention mask ``(L,)`` / ``(B, L)``; a span that touches padding raises.
        span_mask: ``(S,)`` / ``(B, S)``, 1/True for real spans, 0/False for padded ones.
        scores: ``(L,)`` / ``(B, L)`` per-token attention logits for ``attention`` (for
            example from a learned ``Linear(H, 1)``); gradients flow through them.
        width_buckets: ``None`` (no width feature), ``"log"`` (``LOG_WIDTH_BUCKETS``) or
            ascending lower bounds of width buckets; appends a one-hot bucket vector.
        check: the data checks (span bounds, spans over padding, 0/1 masks, NaN/inf) of
            the vectorised path, as in ``sequence_embedding``. NumPy input and CPU tensors
            without gradient are always checked exactly.

    Returns:
        ``(S, D)`` or ``(B, S, D)``, ``D = span_output_dim(H, strategy, width_buckets)``,
        float32 (float64 for float64 input), the input's kind and device. Padded spans
        give zero vectors; they are never gathered.

    Raises:
        ValueError: start > end, an index outside ``0..L-1``, a span over padding, or
            mismatched shapes; the message names the span as ``(row, span)``.

    Example:
        >>> import numpy as np
        >>> h = np.random.rand(8, 256).astype(np.float32)
        >>> span_embeddings(h, np.array([[3, 4]]), "endpoints").shape
        (1, 512)
    """
    terms = parse_span_strategy(strategy)
    ax.float_hidden(hidden)
    mode = ax.check_mode(check)
    given = {"mask": mask, "span_mask": span_mask, "scores": scores, "width_buckets": width_buckets}
    if dense_path(hidden, scores):
        return spans_dense(hidden, spans, terms, check=mode or False, **given)
    return _spans_by_rows(hidden, spans, terms, **given)


def _spans_by_rows(
    hidden: Array,
    spans: Any,
    terms: tuple[str, ...],
    *,
    mask: Any,
    span_mask: Any,
    scores: Array | None,
    width_buckets: Any,
) -> Array:
    """The per-row path: spans planned on the host, reduced offset by offset."""
    (hidden, scores), restore = ax.cpu_fast_path(hidden, scores)
    xp, out_dtype = ax.float_hidden(hidden)
    h, batched = ax.batch_view(hidden), hidden.ndim == 3
    b, length, hid = h.shape
    sp = _host_spans(spans, batched, b)
    n_spans = sp.shape[1]
    padded = (sp == -1).all(axis=-1)
    if span_mask is not None:
        lead = (b, n_spans) if batched else (n_spans,)
        padded |= ~ax.host_mask(span_mask, lead, "span_mask").reshape(b, n_spans)
    real = None if mask is None else ax.host_mask(mask, tuple(hidden.shape[:-1]))
    _check_spans(sp, padded, length, None if real is None else real.reshape(b, length), batched)
    score_flat = None
    if scores is not None:
        score_flat = xp.reshape(_check_scores(scores, hidden), (b * length,))
    plan = _plan(sp, padded, length)
    flat = xp.reshape(h, (b * length, hid))
    if len(plan.slot) == 0:
        dim = span_output_dim(hid, terms, width_buckets)
        full = xp.zeros((b, n_spans, dim), dtype=out_dtype, device=ax.device_of(h))
        return restore(full if batched else full[0])
    parts = [_term(xp, term, flat, plan, out_dtype, score_flat) for term in terms]
    if width_buckets is not None:
        parts.append(_width_one_hot(xp, plan, width_buckets, out_dtype, flat))
    out = parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1)
    ax.check_finite(xp, out)
    full = _scatter(xp, out, plan, b * n_spans, flat)
    full = xp.reshape(full, (b, n_spans, full.shape[-1]))
    return restore(full if batched else full[0])


def _host_spans(spans: Any, batched: bool, b: int) -> np.ndarray:
    sp = ax.to_host(spans, "spans")
    # bool is not an integer subtype here
    sp = _span_form(sp, np.issubdtype(sp.dtype, np.integer), batched, b)
    return sp.astype(np.int64).reshape(b, sp.shape[-2], 2)


def _span_form(sp: Any, integer: bool, batched: bool, b: int) -> Any:
    """``sp`` (NumPy or torch) of ``integer`` dtype, ``(S, 2)`` or ``(B, S, 2)`` as
    ``batched`` says, checked from metadata; an empty one reshaped so."""
    if math.prod(sp.shape) == 0:
        sp = sp.reshape((b, 0, 2) if batched else (0, 2))
    if not integer:
        type_error("spans", "an integer array of inclusive [start, end] pairs",
                   f"dtype {ax.dtype_name(sp)}")  # fmt: skip
    if sp.ndim != (3 if batched else 2) or sp.shape[-1] != 2 or (batched and sp.shape[0] != b):
        value_error(
            "spans",
            f"of shape {'(B, S, 2)' if batched else '(S, 2)'} to match `hidden`"
            + (f" with B={b}" if batched else ""),
            f"shape {tuple(sp.shape)}",
            "Each span is one [start, end] pair of token indices, ends inclusive.",
        )
    return sp


def _check_spans(
    sp: np.ndarray, padded: np.ndarray, length: int, real: np.ndarray | None, batched: bool
) -> None:
    start, end = sp[..., 0], sp[..., 1]
    live = ~padded

    def fail(cond: np.ndarray, problem: str, fix: str) -> None:
        bad = np.argwhere(live & cond)
        if len(bad):
            r, s = (int(i) for i in bad[0])
            raise InputError(arg="spans", index=(r, s) if batched else s, expected="a valid span",
                             got=f"[{int(start[r, s])}, {int(end[r, s])}], which {problem} "
                             f"({len(bad)} span(s) affected)", fix=fix)  # fmt: skip

    fail(
        (start < 0) | (end < 0),
        "has a negative index",
        "Mark padded spans with [-1, -1] or `span_mask`.",
    )
    fail(start > end, "has start > end", "Ends are inclusive: a one-token span is [i, i].")
    fail(end >= length, f"reaches past the last token (L = {length})", "Indices run 0..L-1.")
    if real is not None:
        prefix = np.concatenate([np.zeros((real.shape[0], 1), np.int64), np.cumsum(real, 1)], 1)
        s_c, e_c = np.clip(start, 0, length - 1), np.clip(end, 0, length - 1)
        inside = np.take_along_axis(prefix, e_c + 1, 1) - np.take_along_axis(prefix, s_c, 1)
        fail(inside != e_c - s_c + 1, "covers padding", "Spans must lie on real tokens of `mask`.")


def _plan(sp: np.ndarray, padded: np.ndarray, length: int) -> SpanPlan:
    _b, n, _ = sp.shape
    slot = np.flatnonzero(~padded.reshape(-1))
    rows = slot // max(n, 1)
    flat_sp = sp.reshape(-1, 2)[slot]
    width = flat_sp[:, 1] - flat_sp[:, 0] + 1
    order = np.argsort(-width, kind="stable")
    slot, rows, flat_sp, width = slot[order], rows[order], flat_sp[order], width[order]
    max_w = int(width[0]) if len(width) else 0
    active = (width[None, :] > np.arange(max_w)[:, None]).sum(axis=1)
    return SpanPlan(slot=slot, base=rows * length + flat_sp[:, 0], width=width, active=active)


def _gather(xp: Any, flat: Array, plan: SpanPlan, k: int) -> Array:
    """Token ``start + k`` of every span still active at offset ``k``: ``(active[k], H)``."""
    n = int(plan.active[k])
    return xp.take(flat, ax.to_device(xp, plan.base[:n] + k, flat), axis=0)


def _reduce(xp: Any, flat: Array, plan: SpanPlan, dtype: Any, how: str) -> Array:
    """Sum, max or count-normalised mean over each span's tokens: ``(V, H)``."""
    acc = xp.astype(_gather(xp, flat, plan, 0), dtype)
    for k in range(1, len(plan.active)):
        n = int(plan.active[k])
        tok = xp.astype(_gather(xp, flat, plan, k), dtype)
        head = xp.maximum(acc[:n], tok) if how == "max" else acc[:n] + tok
        acc = xp.concat([head, acc[n:]], axis=0)
    if how == "mean":
        acc = acc / xp.astype(ax.to_device(xp, plan.width[:, None], acc), dtype)
    return acc


def _attention(xp: Any, flat: Array, plan: SpanPlan, dtype: Any, scores: Array | None) -> Array:
    n_valid, steps = len(plan.width), len(plan.active)
    if scores is None:
        query = _reduce(xp, flat, plan, dtype, "mean")
        scale = float(flat.shape[-1]) ** -0.5

        def logit(k: int) -> Array:
            n = int(plan.active[k])
            return xp.sum(xp.astype(_gather(xp, flat, plan, k), dtype) * query[:n], axis=-1) * scale
    else:

        def logit(k: int) -> Array:
            n = int(plan.active[k])
            return xp.astype(xp.take(scores, ax.to_device(xp, plan.base[:n] + k, scores)), dtype)

    logits = [logit(k) for k in range(steps)]
    # softmax inside each span only: shift by the span's own maximum for stability
    top = logits[0]
    for k in range(1, steps):
        n = logits[k].shape[0]
        top = xp.concat([xp.maximum(top[:n], logits[k]), top[n:]], axis=0)
    total = xp.zeros(n_valid, dtype=dtype, device=ax.device_of(flat))
    acc = xp.zeros((n_valid, flat.shape[-1]), dtype=dtype, device=ax.device_of(flat))
    for k in range(steps):
        n = logits[k].shape[0]
        w = xp.exp(logits[k] - top[:n])
        tok = xp.astype(_gather(xp, flat, plan, k), dtype)
        acc = xp.concat([acc[:n] + w[:, None] * tok, acc[n:]], axis=0)
        total = xp.concat([total[:n] + w, total[n:]], axis=0)
    return acc / total[:, None]


def _term(
    xp: Any, term: str, flat: Array, plan: SpanPlan, dtype: Any, scores: Array | None
) -> Array:
    if term in ("mean", "max"):
        return _reduce(xp, flat, plan, dtype, term)
    if term == "attention":
        return _attention(xp, flat, plan, dtype, scores)
    start = xp.astype(_gather(xp, flat, plan, 0), dtype)
    end_index = ax.to_device(xp, plan.base + plan.width - 1, flat)
    end = xp.astype(xp.take(flat, end_index, axis=0), dtype)
    return endpoint_term(term, start, end)


def endpoint_term(term: str, x: Any, y: Any) -> Any:
    """An endpoint term of ``x`` (the start token's vectors) and ``y`` (the end's), any
    shape, NumPy or torch: ``"x"``, ``"y"`` or ``"x-y"``-like (``+ - * /``)."""
    if term in ("x", "y"):
        return x if term == "x" else y
    a, op, c = (x if term[0] == "x" else y), term[1], (x if term[2] == "x" else y)
    if op == "-":
        return a - c
    if op == "+":
        return a + c
    return a * c if op == "*" else a / c


def _check_scores(scores: Array, hidden: Array) -> Array:
    """``scores`` checked: one float logit per token of ``hidden`` (both paths)."""
    want = tuple(hidden.shape[:-1])
    if tuple(scores.shape) != want:
        value_error(
            "scores", f"of shape {want} (one logit per token)", f"shape {tuple(scores.shape)}"
        )
    dt = scores.dtype  # torch's or NumPy's
    if not (
        dt.is_floating_point if hasattr(dt, "is_floating_point") else np.issubdtype(dt, np.floating)
    ):
        type_error("scores", "a floating point array", f"dtype {ax.dtype_name(scores)}")
    return scores


def _bucket_bounds(width_buckets: Any) -> tuple[int, ...]:
    if isinstance(width_buckets, str):
        if width_buckets != "log":
            value_error(
                "width_buckets", "None, 'log' or ascending lower bounds", repr(width_buckets)
            )
        return LOG_WIDTH_BUCKETS
    bounds = tuple(int(x) for x in width_buckets)
    if not bounds or bounds[0] != 1 or any(b >= c for b, c in itertools.pairwise(bounds)):
        value_error(
            "width_buckets",
            "strictly ascending lower bounds starting at 1 (e.g. (1, 2, 4, 8))",
            repr(width_buckets),
        )
    return bounds


def num_width_buckets(width_buckets: Any = "log") -> int:
    """How many buckets ``width_buckets`` defines (the width one-hot's size)."""
    return len(_bucket_bounds(width_buckets))


def bucket_widths(widths: Any, width_buckets: Any = "log") -> np.ndarray:
    """Bucket index of each span width (token count, ``end - start + 1``); int64, same shape."""
    bounds = np.asarray(_bucket_bounds(width_buckets))
    return (np.searchsorted(bounds, ax.to_host(widths, "widths"), side="right") - 1).astype(
        np.int64
    )


def _width_one_hot(xp: Any, plan: SpanPlan, width_buckets: Any, dtype: Any, like: Array) -> Array:
    n_buckets = len(_bucket_bounds(width_buckets))
    one_hot = np.eye(n_buckets)[bucket_widths(plan.width, width_buckets)]
    return xp.astype(ax.to_device(xp, one_hot, like), dtype)


def _scatter(xp: Any, values: Array, plan: SpanPlan, n_slots: int, like: Array) -> Array:
    """Place the ``(V, D)`` valid-span rows into ``(n_slots, D)``, zeros for padded spans."""
    # valid row for each slot, or V (pointing at an appended zero row) for padded slots
    source = np.full(n_slots, len(plan.slot), np.int64)
    source[plan.slot] = np.arange(len(plan.slot))
    zero = xp.zeros((1, values.shape[-1]), dtype=values.dtype, device=ax.device_of(like))
    return xp.take(xp.concat([values, zero], axis=0), ax.to_device(xp, source, like), axis=0)


# The vectorised path. Every term is a whole-batch operation over ``(B, S)`` spans:
# endpoints are gathers, mean is a difference of prefix sums, max is a range-maximum
# over a doubling table, attention a softmax over each span's tokens. The number of
# tensor operations is fixed by the strategy and ``L``, never by ``B`` or ``S``.


def spans_dense(
    hidden: Any,
    spans: Any,
    terms: tuple[str, ...],
    *,
    mask: Any = None,
    span_mask: Any = None,
    scores: Any = None,
    width_buckets: Any = None,
    check: bool | str = True,
    checks: ax.Checks | None = None,
) -> Any:
    """``span_embeddings`` on the vectorised torch path (``terms`` already parsed).

    Memory beyond the ``(B, S, D)`` result: ``O(B L H)`` for the prefix sums of
    ``mean``/``attention``, ``O(B L H log2 L)`` for the doubling table of ``max``, and
    ``O(B S L)`` for the span-by-token softmax of ``attention``; never ``(B, S, L, H)``.
    ``check`` as in ``span_embeddings``. Prefix sums and the attention matmul read whole
    rows, so a NaN/inf outside every span (padding included) can reach a ``mean`` or
    ``attention`` result: on the CPU (default mode) and with ``"full"`` such a call is
    recomputed on the per-row path (exact, or the per-row error); on an accelerator the
    default mode cannot reroute without waiting, so its asynchronous check fails instead.
    ``check=False`` skips the data checks (span bounds, 0/1 masks, NaN/inf); invalid
    spans then give unspecified values (indices are clamped, never out of range) instead
    of an error, and a NaN/inf anywhere in a row can reach its spans. ``checks`` lets a
    caller add its own checks to the same ones (its mode wins over ``check``).
    """
    import torch

    if not hidden.dtype.is_floating_point:
        ax.not_float(hidden)
    dtype = ax.result_dtype(hidden)
    h, batched = ax.batch_view(hidden), hidden.ndim == 3
    b, length, hid = h.shape
    mode = ax.check_mode(check)
    if checks is None and mode:
        checks = ax.Checks(mode)
    sp = _device_spans(spans, batched, b, h)
    n_spans = sp.shape[1]
    padded = (sp == -1).all(dim=-1)
    if span_mask is not None:
        lead = (b, n_spans) if batched else (n_spans,)
        live = ax.device_mask(span_mask, lead, h, "span_mask", checks).reshape(b, n_spans)
        padded = padded | ~live
    real = None
    if mask is not None:
        real = ax.device_mask(mask, tuple(hidden.shape[:-1]), h, "mask", checks).reshape(b, length)
    start, end = sp[..., 0], sp[..., 1]
    if checks is not None:
        checks.add(
            spans_valid(start, end, padded, length, real),
            lambda: _check_spans(
                ax.to_host(sp, "spans"),
                ax.to_host(padded, "spans"),
                length,
                None if real is None else ax.to_host(real, "mask"),
                batched,
            ),
            "a span has start > end, an index outside 0..L-1, or covers padding",
        )
    score_rows = None if scores is None else _check_scores(scores, hidden).reshape(b, length)
    width_dim = 0 if width_buckets is None else num_width_buckets(width_buckets)
    dim = hid * len(terms) + width_dim
    if length == 0 or n_spans == 0 or b == 0:
        out = torch.zeros((b, n_spans, dim), dtype=dtype, device=h.device)
    else:
        # padded (and, with check=False, invalid) spans read token 0: indices stay in range
        start = torch.where(padded, 0, start).clamp(0, length - 1)
        end = torch.maximum(torch.where(padded, 0, end).clamp(0, length - 1), start)
        ctx = _SpanContext(h, start, end, dtype, score_rows)
        parts = [ctx.term(term) for term in terms]
        if width_buckets is not None:
            parts.append(_dense_width_one_hot(end - start + 1, width_buckets, dtype))
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        out = torch.where(padded[..., None], torch.zeros((), dtype=dtype, device=h.device), out)
    if checks is not None:
        # A non-finite result (see the docstring) goes to the per-row path, which reads
        # only each span's tokens. (Added last: it runs after the others.)
        checks.add(
            ax.all_finite(out),
            _not_finite,
            "NaN or inf reached the result; on the vectorised path one anywhere in a row, "
            "padding included, reaches its mean and attention terms",
        )
        try:
            checks.run()
        except _NotFinite:
            return _spans_by_rows(
                hidden,
                spans,
                terms,
                mask=mask,
                span_mask=span_mask,
                scores=scores,
                width_buckets=width_buckets,
            )
    return out if batched else out[0]


class _NotFinite(Exception):
    pass


def _not_finite() -> None:
    raise _NotFinite


def _device_spans(spans: Any, batched: bool, b: int, like: Any) -> Any:
    """Spans as an int64 ``(B, S, 2)`` tensor on ``like``'s device; shape and dtype checked
    from metadata only (host arrays go through ``_host_spans``)."""
    import torch

    if not isinstance(spans, torch.Tensor):
        return torch.as_tensor(_host_spans(spans, batched, b), device=like.device)
    dt = spans.dtype
    integer = not (dt == torch.bool or dt.is_floating_point or dt.is_complex)
    spans = _span_form(spans, integer, batched, b)
    return spans.to(device=like.device, dtype=torch.long).reshape(b, spans.shape[-2], 2)


class _SpanContext:
    """One batch of spans: ``h`` ``(B, L, H)``, clamped ``start``/``end`` ``(B, S)``.

    Shared intermediates (endpoint gathers, prefix sums, span means) are built once.
    """

    def __init__(self, h: Any, start: Any, end: Any, dtype: Any, scores: Any) -> None:
        import torch

        self.h, self.start, self.end, self.dtype, self.scores = h, start, end, dtype, scores
        self.rows = torch.arange(h.shape[0], device=h.device)[:, None]
        self._cache: dict[str, Any] = {}

    def at(self, pos: Any, table: Any = None) -> Any:
        """Gather the token at ``pos`` ``(B, S)`` of every span from ``table`` ``(B, n, H)``."""
        t = self.h if table is None else table
        b, n, hid = t.shape
        index = (self.rows * n + pos).reshape(-1)
        return t.reshape(b * n, hid).index_select(0, index).reshape(*pos.shape, hid)

    def cached(self, key: str, make: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def term(self, term: str) -> Any:
        import torch

        if term == "mean":
            return self.mean()
        if term == "max":
            return self.max()
        if term == "attention":
            return self.attention()
        # one gather for both endpoints: one zero-filled gradient buffer, not two
        ends = self.cached(
            "ends", lambda: self.at(torch.cat([self.start, self.end], dim=1)).to(self.dtype)
        )
        return endpoint_term(term, *ends.split(self.start.shape[1], dim=1))

    def mean(self) -> Any:
        """Difference of prefix sums, accumulated in float64 where the device has it (a
        float32 running sum would lose the short spans of long rows to cancellation)."""
        import torch

        def make() -> Any:
            acc = torch.float32 if self.h.device.type == "mps" else torch.float64
            prefix = torch.nn.functional.pad(torch.cumsum(self.h, dim=1, dtype=acc), (0, 0, 1, 0))
            total = self.at(self.end + 1, prefix) - self.at(self.start, prefix)
            width = (self.end - self.start + 1).to(acc)[..., None]
            return (total / width).to(self.dtype)

        return self.cached("mean", make)

    def max(self) -> Any:
        """Range maximum from a doubling table: level ``k`` holds the maximum of every
        window of ``2**k`` tokens, and a span of width ``w`` is the maximum of the two
        (overlapping) windows of size ``2**floor(log2 w)`` at its two ends."""
        import torch

        width = self.end - self.start + 1
        level = self.h
        out = self.at(self.start, level)  # width 1
        size = 1
        while 2 * size <= self.h.shape[1]:
            level = torch.maximum(level[:, :-size], level[:, size:])
            size *= 2
            # clamped so the gathers of spans narrower than this level stay in range
            last = level.shape[1] - 1
            left = self.at(self.start.clamp(max=last), level)
            right = self.at((self.end - size + 1).clamp(0, last), level)
            out = torch.where((width >= size)[..., None], torch.maximum(left, right), out)
        return out.to(self.dtype)

    def attention(self) -> Any:
        """Softmax over each span's own tokens, as a ``(B, S, L)`` weight matrix."""
        import torch

        h = self.h.to(self.dtype)
        if self.scores is None:
            scale = float(h.shape[-1]) ** -0.5
            logits = torch.bmm(self.mean(), h.transpose(1, 2)) * scale
        else:
            logits = self.scores.to(self.dtype)[:, None, :].expand(-1, self.start.shape[1], -1)
        pos = torch.arange(h.shape[1], device=h.device)
        inside = (pos >= self.start[..., None]) & (pos <= self.end[..., None])
        logits = torch.where(inside, logits, float("-inf"))
        return torch.bmm(torch.softmax(logits, dim=-1), h)


_BOUNDS_ON_DEVICE: dict[tuple[tuple[int, ...], str], Any] = {}


def bucket_width_tensor(widths: Any, width_buckets: Any = "log") -> Any:
    """``bucket_widths`` for a torch tensor, computed on its own device.

    The bucket bounds are copied to each device once and kept (the copy is the only
    host-to-device transfer, and it happens on first use, not in every forward pass).
    """
    import torch

    bounds = _bucket_bounds(width_buckets)
    key = (bounds, str(widths.device))
    edges = _BOUNDS_ON_DEVICE.get(key)
    if edges is None:
        edges = _BOUNDS_ON_DEVICE[key] = torch.tensor(bounds, device=widths.device)
    return torch.bucketize(widths, edges, right=True) - 1


def _dense_width_one_hot(width: Any, width_buckets: Any, dtype: Any) -> Any:
    import torch

    bucket = bucket_width_tensor(width, width_buckets)
    n = num_width_buckets(width_buckets)
    return (bucket[..., None] == torch.arange(n, device=width.device)).to(dtype)
