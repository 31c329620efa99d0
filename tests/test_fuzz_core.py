"""Fuzz every core function with hostile inputs.

Each call either returns a finite result of the documented shape, or raises a
ValueError/TypeError whose message names the offending argument in backticks. Nothing
else may escape (no IndexError, RuntimeError or bare torch error), and NaN/inf never
comes back silently.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import pool_row, span_reference

from poolkit import (
    SEQUENCE_STRATEGIES,
    WORD_STRATEGIES,
    layer_mix,
    sequence_embedding,
    span_embeddings,
    token_embeddings,
    word_embeddings,
)

NAMED = re.compile(r"`\w+(?:\[\d+\])*`")  # an argument, or an element of one
DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "bool"]


def make(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, kind: str, special: str):
    x = rng.standard_normal(shape) * 3
    if special == "nan" and x.size:
        x.flat[rng.integers(x.size)] = np.nan
    if special == "inf" and x.size:
        x.flat[rng.integers(x.size)] = -np.inf
    if kind == "numpy":
        return x.astype("float32" if dtype == "bfloat16" else dtype)
    t = torch.from_numpy(x).to(getattr(torch, dtype))
    # tensors that need a gradient take the vectorised path
    return t.requires_grad_(True) if kind == "torch_grad" and t.is_floating_point() else t


@st.composite
def hostile(draw: st.DrawFn):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    b, length, hid = draw(st.integers(0, 3)), draw(st.integers(0, 6)), draw(st.integers(1, 4))
    batched = draw(st.booleans())
    shape = (b, length, hid) if batched else (length, hid)
    if draw(st.integers(0, 9)) == 0:
        shape = shape[1:] or (3,)  # wrong rank
    kind = draw(st.sampled_from(["numpy", "torch", "torch_grad"]))
    hidden = make(
        rng,
        shape,
        draw(st.sampled_from(DTYPES)),
        kind,
        draw(st.sampled_from(["", "", "nan", "inf"])),
    )
    lead = shape[:-1]
    mask_shape = draw(
        st.sampled_from([lead, lead, lead, (*lead[:-1], max(length + 1, 1)), (2, 2, 2)])
    )
    mask_dtype = draw(st.sampled_from(["int64", "bool", "bool", "float32", "int32"]))
    mask = (rng.random(mask_shape) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))).astype(mask_dtype)
    if draw(st.integers(0, 9)) == 0:
        mask = mask * 2  # not 0/1
    n_spans = draw(st.integers(0, 3))
    span_shape = (b, n_spans, 2) if batched else (n_spans, 2)
    spans = rng.integers(-2, max(length, 1) + 2, size=span_shape)
    word_len = length + draw(st.sampled_from([0, 0, 0, 1, -1]))
    word_ids = rng.integers(-1, 3, size=(*lead[:-1], max(word_len, 0)))
    if kind == "torch_grad":  # index inputs as tensors too: planned on the device
        mask, spans, word_ids = (torch.as_tensor(a) for a in (mask, spans, word_ids))
    return {"hidden": hidden, "mask": mask, "spans": spans, "word_ids": word_ids, "kind": kind}


def names_an_argument(err: Exception, args: tuple[str, ...]) -> bool:
    """The message names (in backticks) one of ``args``, the called function's arguments."""
    return any(name.strip("`").split("[")[0] in args for name in NAMED.findall(str(err)))


def check(call, args: tuple[str, ...]) -> object | None:
    """``call()``'s result (finite), or None after its error named one of ``args``."""
    try:
        out = call()
    except (ValueError, TypeError) as err:
        assert names_an_argument(err, args), f"message names none of {args}: {err}"
        return None
    values = out if isinstance(out, list) else [out]
    for v in values:
        arr = v.detach().float().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        assert np.isfinite(arr).all(), "non-finite result returned silently"
    return out


def _as64(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _batched(x, hidden) -> np.ndarray:
    """``x`` as float64 NumPy with a batch axis: ``hidden`` ``(L, H)`` is one unbatched row."""
    arr = _as64(x)
    return arr if len(hidden.shape) == 3 else arr[None]


def _close(got, want: np.ndarray, hidden) -> None:
    """Equal up to the rounding of ``hidden``'s dtype (results are float32 at least)."""
    got = _as64(got)
    name = str(hidden.dtype).removeprefix("torch.")
    tol = {"float64": 1e-9, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}.get(name, 1e-5)
    scale = max(1.0, float(np.abs(want).max())) if np.size(want) else 1.0
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


@settings(max_examples=300)
@given(
    case=hostile(),
    strategy=st.sampled_from(SEQUENCE_STRATEGIES),
    empty=st.sampled_from(["raise", "zeros"]),
)
def test_sequence_embedding(case, strategy, empty):
    out = check(
        lambda: sequence_embedding(case["hidden"], case["mask"], strategy, empty=empty),
        ("hidden", "mask", "strategy", "empty"),
    )
    if out is None:
        return
    assert tuple(out.shape) == (*tuple(case["hidden"].shape[:-2]), case["hidden"].shape[-1])
    # Against the reference: each row's tokens where the mask is non-zero, pooled in float64;
    # a row with none is zeros (empty="zeros"; "raise" refused it above).
    h = case["hidden"]
    hidden, mask = _batched(h, h), _batched(case["mask"], h)
    want = np.zeros((hidden.shape[0], hidden.shape[-1]))  # (B, H)
    for b, (row, keep) in enumerate(zip(hidden, mask != 0, strict=True)):
        if keep.any():
            want[b] = pool_row(row[keep], strategy)
    _close(_batched(out, h), want, h)


@settings(max_examples=300)
@given(case=hostile())
def test_token_embeddings(case):
    out = check(lambda: token_embeddings(case["hidden"], None, case["mask"]), ("hidden", "mask"))
    if out is None:
        return
    # Against the reference: each row's tokens where the mask is non-zero, in order.
    h = case["hidden"]
    hidden, mask = _batched(h, h), _batched(case["mask"], h)
    rows = out if isinstance(out, list) else [out]
    assert len(rows) == hidden.shape[0]
    for b, got in enumerate(rows):
        _close(got, hidden[b][mask[b] != 0], case["hidden"])


@settings(max_examples=300)
@given(case=hostile(), strategy=st.sampled_from(list(WORD_STRATEGIES)))
def test_word_embeddings(case, strategy):
    out = check(
        lambda: word_embeddings(case["hidden"], case["word_ids"], strategy),
        ("hidden", "word_ids", "strategy"),
    )
    if out is None:
        return
    # Against the reference: word w of row b pools the tokens whose id is w (zeros if none).
    h = case["hidden"]
    hidden, ids = _batched(h, h), _batched(case["word_ids"], h)
    got = _batched(out, h)
    for b in range(hidden.shape[0]):
        for w in range(got.shape[1]):
            tokens = hidden[b][ids[b] == w]
            want = (np.zeros(got.shape[-1]) if not len(tokens)
                    else np.concatenate([tokens[0], tokens[-1]]) if strategy == "endpoints"
                    else pool_row(tokens, strategy if strategy not in ("first", "last")
                                  else {"first": "cls", "last": "last"}[strategy]))  # fmt: skip
            _close(got[b, w], want, case["hidden"])


@settings(max_examples=300)
@given(
    case=hostile(),
    strategy=st.sampled_from(["endpoints", "mean", "max", "attention", "diff_sum", "x/y"]),
)
def test_span_embeddings(case, strategy):
    out = check(
        lambda: span_embeddings(case["hidden"], case["spans"], strategy, mask=case["mask"]),
        ("hidden", "spans", "strategy", "mask"),
    )
    if out is None or strategy in ("attention", "x/y"):  # no closed form in reference.py
        return
    # Against the reference: each inclusive span pooled alone; [-1, -1] pads with zeros.
    h = case["hidden"]
    hidden, spans = _batched(h, h), _batched(case["spans"], h).astype(np.int64)
    got = _batched(out, h)
    for b in range(spans.shape[0]):
        for k, (start, end) in enumerate(spans[b]):
            want = (np.zeros(got.shape[-1]) if start == end == -1
                    else span_reference(hidden[b], int(start), int(end), strategy))  # fmt: skip
            _close(got[b, k], want, case["hidden"])


@settings(max_examples=300)
@given(case=hostile(), layers=st.sampled_from(["last", "last4", "first_last", 0, [0, 5], "nope"]))
def test_layer_mix(case, layers):
    h = case["hidden"]
    finite = h.dtype in (torch.int64, torch.bool) or bool(
        np.isfinite(
            np.asarray(h.detach().float() if isinstance(h, torch.Tensor) else h, float)
        ).all()
    )
    args = ("hidden_states", "layers", "how")
    if finite:
        check(lambda: layer_mix([h] * 3, layers), args)
        return
    # Documented: NaN/inf propagate through layer_mix (padding included), never silently
    # dropped: a success must carry them on.
    try:
        out = layer_mix([h] * 3, layers)
    except (ValueError, TypeError) as err:
        assert names_an_argument(err, args), f"message names none of {args}: {err}"
    else:
        arr = (
            out.detach().float().numpy()
            if isinstance(out, torch.Tensor)
            else np.asarray(out, float)
        )
        assert not np.isfinite(arr).all(), "non-finite input came out finite"


@pytest.mark.parametrize("bad", [None, "text", 3.0, [[1.0, 2.0]], {"a": 1}])
def test_non_arrays_are_type_errors(bad):
    with pytest.raises(TypeError, match="`hidden`"):
        sequence_embedding(bad)
    with pytest.raises(TypeError, match="`hidden`"):
        span_embeddings(bad, np.zeros((0, 2), np.int64))


@settings(max_examples=100)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4)),
    n_spans=st.integers(1, 3),
    strategy=st.sampled_from(["endpoints", "mean", "max", "diff_sum", "x,y,x*y", "x-y"]),
    kind=st.sampled_from(["numpy", "torch", "torch_grad"]),
)
def test_valid_spans_equal_the_reference(seed, shape, n_spans, strategy, kind):
    """Hostile spans are nearly always refused; valid ones must pool what reference.py does."""
    rng = np.random.default_rng(seed)
    hidden = make(rng, shape, "float32", kind, "")
    ends = np.sort(rng.integers(0, shape[1], size=(shape[0], n_spans, 2)), axis=-1)
    got = _as64(span_embeddings(hidden, ends, strategy))
    for b in range(shape[0]):
        for k, (start, end) in enumerate(ends[b]):
            want = span_reference(_as64(hidden)[b], int(start), int(end), strategy)
            _close(got[b, k], want, hidden)
