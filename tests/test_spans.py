"""span_embeddings against the seed document's slicing rule, span by span."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reference import softmax_pool, span_reference
from tester import KINDS_DTYPES, SIDES, check_rule, padded_mask

from poolkit import LOG_WIDTH_BUCKETS, bucket_widths, span_embeddings, span_output_dim

STRATEGIES = ["endpoints", "diff_sum", "mean", "max", "x,y,x*y", "x-y"]


@st.composite
def span_batches(draw: st.DrawFn):
    """(hidden, mask, spans with -1 padding rows, valid flags)."""
    b = draw(st.integers(1, 4))
    length = draw(st.integers(1, 10))
    hid = draw(st.integers(1, 5))
    n_spans = draw(st.integers(0, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    hidden = rng.standard_normal((b, length, hid))
    lengths = rng.integers(1, length + 1, size=b)
    mask = padded_mask(rng, lengths, length, draw(st.sampled_from(SIDES)))
    spans = np.full((b, n_spans, 2), -1, np.int64)
    for i in range(b):
        first = int(np.argmax(mask[i]))  # spans lie on the real tokens, whatever the side
        for s in range(n_spans):
            if rng.random() < 0.8:
                lo = rng.integers(0, lengths[i])
                spans[i, s] = first + lo, first + rng.integers(lo, lengths[i])
    return hidden, mask, spans


@pytest.mark.parametrize(("kind", "dtype"), KINDS_DTYPES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@given(data=span_batches())
def test_matches_span_by_span_reference(kind, dtype, strategy, data):
    hidden, mask, spans = data
    dim = span_output_dim(hidden.shape[-1], strategy)

    def reference(h: np.ndarray) -> np.ndarray:
        out = np.zeros((*spans.shape[:2], dim))  # padding spans (-1) give zeros
        for b, s in zip(*np.nonzero(spans[..., 0] >= 0), strict=True):
            out[b, s] = span_reference(h[b], *spans[b, s], strategy)
        return out

    check_rule(lambda x: span_embeddings(x, spans, strategy, mask=mask), reference, hidden,
               kind, dtype)  # fmt: skip


@given(data=span_batches())
def test_attention_is_softmax_inside_the_span(data):
    hidden, mask, spans = data
    x = hidden.astype(np.float32)
    rng = np.random.default_rng(0)
    scores = rng.standard_normal(mask.shape).astype(np.float32) * 5
    out = span_embeddings(x, spans, "attention", scores=scores)
    default = span_embeddings(x, spans, "attention")
    for b, s in zip(*np.nonzero(spans[..., 0] >= 0), strict=True):
        start, end = spans[b, s]
        tokens = x[b, start : end + 1].astype(np.float64)
        np.testing.assert_allclose(
            out[b, s],
            softmax_pool(tokens, scores[b, start : end + 1].astype(np.float64)),
            rtol=1e-5,
            atol=1e-5,
        )
        # documented parameter-free default: scaled dot product with the span mean
        logits = tokens @ tokens.mean(0) / np.sqrt(x.shape[-1])
        np.testing.assert_allclose(
            default[b, s], softmax_pool(tokens, logits), rtol=1e-5, atol=1e-5
        )


def test_attention_scores_receive_gradients():
    h = torch.randn(2, 5, 3)
    scores = torch.randn(2, 5, requires_grad=True)
    out = span_embeddings(h, torch.tensor([[[0, 2]], [[1, 4]]]), "attention", scores=scores)
    out.sum().backward()
    assert scores.grad is not None
    assert scores.grad[0, 3:].abs().sum() == 0  # tokens outside every span get no gradient
    assert scores.grad[0, :3].abs().sum() > 0


def test_seed_span_example_unbatched():
    h = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    endpoints = span_embeddings(h, np.array([[3, 4]]), "endpoints")[0]
    mean = span_embeddings(h, np.array([[3, 4]]), "mean")[0]
    assert endpoints.shape == (512,)
    assert mean.shape == (256,)
    np.testing.assert_array_equal(endpoints, np.concatenate([h[3], h[4]]))
    np.testing.assert_allclose(mean, (h[3] + h[4]) / 2, rtol=1e-6)


def test_span_mask_marks_padded_spans_and_they_are_never_gathered():
    h = np.ones((1, 4, 2), np.float32)
    spans = np.array([[[0, 1], [7, 9]]])  # the second is out of range but masked away
    out = span_embeddings(h, spans, "mean", span_mask=np.array([[1, 0]]))
    np.testing.assert_array_equal(out[0, 1], np.zeros(2))
    np.testing.assert_array_equal(out[0, 0], np.ones(2))


def test_width_buckets_one_hot():
    widths = np.array([1, 2, 3, 4, 5, 6, 8, 9, 16, 17, 64, 65, 500])
    expected = [0, 1, 2, 3, 4, 5, 5, 6, 6, 7, 8, 9, 9]
    np.testing.assert_array_equal(bucket_widths(widths), expected)
    h = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    out = span_embeddings(h, np.array([[0, 0], [2, 9], [-1, -1]]), "mean", width_buckets="log")
    assert out.shape == (3, 3 + len(LOG_WIDTH_BUCKETS))
    np.testing.assert_array_equal(out[0, 3:], np.eye(10)[0])
    np.testing.assert_array_equal(out[1, 3:], np.eye(10)[5])  # width 8 -> bucket 6-8 (index 5)
    np.testing.assert_array_equal(out[2], 0)
    custom = span_embeddings(h, np.array([[0, 3]]), "x", width_buckets=(1, 3))
    np.testing.assert_array_equal(custom[0, 3:], [0, 1])


def test_many_long_spans_memory_stays_bounded():
    # (B, S, L, H) would be 4 * 400 * 512 * 64 floats = 210 MB; we never build it
    import tracemalloc

    h = np.random.default_rng(0).standard_normal((4, 512, 64)).astype(np.float32)
    starts = np.random.default_rng(1).integers(0, 256, size=(4, 400))
    spans = np.stack([starts, starts + 255], -1)
    tracemalloc.start()
    out = span_embeddings(h, spans, "max")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40e6, peak
    np.testing.assert_allclose(out[2, 7], h[2, starts[2, 7] : starts[2, 7] + 256].max(0))


@pytest.mark.parametrize(
    ("spans", "kwargs", "message"),
    [
        (
            np.array([[[2, 1]]]),
            {},
            r"`spans\[0\]\[0\]` to be a valid span, but got \[2, 1\], which has start > end.*inclusive",
        ),
        (
            np.array([[[0, 9]]]),
            {},
            r"`spans\[0\]\[0\]` to be a valid span, but got \[0, 9\], which reaches past the last token "
            r"\(L = 4\)",
        ),
        (np.array([[[-2, 1]]]), {}, r"has a negative index.*\[-1, -1\] or `span_mask`"),
        (
            np.array([[[1, 3]]]),
            {"mask": np.array([[1, 1, 1, 0]])},
            r"`spans\[0\]\[0\]` to be a valid span, but got \[1, 3\], which covers padding",
        ),
        (np.array([[0, 1]]), {}, r"Expected `spans` to be of shape \(B, S, 2\).*shape \(1, 2\)"),
        (np.array([[[0.0, 1.0]]]), {}, r"Expected `spans` to be an integer array"),
        (
            np.array([[[0, 1]]]),
            {"strategy": "avg"},
            r"Expected `strategy` to be comma-joined terms.*'avg'",
        ),
        (
            np.array([[[0, 1]]]),
            {"scores": np.ones((1, 3), np.float32), "strategy": "attention"},
            r"`scores` to be of shape \(1, 4\)",
        ),
        (
            np.array([[[0, 1]]]),
            {"width_buckets": (2, 4)},
            r"`width_buckets` to be strictly ascending lower bounds starting at 1",
        ),
        (
            np.array([[[0, 1]]]),
            {"span_mask": np.ones((1, 2))},
            r"`span_mask` to be a bool or integer",
        ),
    ],
)
def test_error_messages(spans, kwargs, message):
    h = np.ones((1, 4, 2), np.float32)
    with pytest.raises((ValueError, TypeError), match=message):
        span_embeddings(h, spans, **kwargs)


def test_empty_span_list_gives_empty_output():
    h = np.ones((2, 4, 3), np.float32)
    assert span_embeddings(h, np.zeros((2, 0, 2), np.int64), "endpoints").shape == (2, 0, 6)
