"""sequence_embedding against a per-row float64 reference, over NumPy and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from reference import sequence_reference
from tester import KINDS, KINDS_DTYPES, SIDES, as_kind, check_rule, padded_mask, to_f64

from poolkit import SEQUENCE_STRATEGIES, sequence_embedding


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hidden float64, mask int, special bool) with left, right or mixed padding."""
    b = draw(st.integers(1, 5))
    length = draw(st.integers(1, 12))
    hid = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((b, length, hid)) * draw(st.sampled_from([1.0, 100.0]))
    lengths = rng.integers(1, length + 1, size=b)
    mask = padded_mask(rng, lengths, length, draw(st.sampled_from(SIDES)))
    # special tokens: first and last real token of each row, like [CLS] ... [SEP]
    special = np.zeros_like(mask)
    for i in range(b):
        real = np.flatnonzero(mask[i])
        special[i, real[0]] = special[i, real[-1]] = True
    return hidden, mask.astype(np.int64), special


@pytest.mark.parametrize(("kind", "dtype"), KINDS_DTYPES)
@pytest.mark.parametrize("strategy", SEQUENCE_STRATEGIES)
@given(data=batches())
def test_matches_per_row_reference(kind, dtype, strategy, data):
    hidden, mask, _ = data
    check_rule(
        lambda x: sequence_embedding(x, mask, strategy),
        lambda h: sequence_reference(h, mask, strategy),
        hidden, kind, dtype,
    )  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", SEQUENCE_STRATEGIES)
@given(data=batches())
def test_exclude_special_matches_reference(kind, strategy, data):
    hidden, mask, special = data
    keep_rows = [i for i in range(len(mask)) if (mask[i].astype(bool) & ~special[i]).any()]
    assume(keep_rows)  # rows left with a token; all-empty batches are tested elsewhere
    hidden, mask, special = hidden[keep_rows], mask[keep_rows], special[keep_rows]
    x = as_kind(hidden, kind, "float32")
    out = sequence_embedding(x, mask, strategy, special_tokens_mask=special, exclude_special=True)
    expected = sequence_reference(to_f64(x), mask, strategy, special)
    np.testing.assert_allclose(to_f64(out), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("strategy", SEQUENCE_STRATEGIES)
@given(data=batches())
def test_padded_batch_equals_each_text_alone(strategy, data):
    hidden, mask, _ = data
    x = hidden.astype(np.float32)
    batch = sequence_embedding(x, mask, strategy)
    for i in range(len(x)):
        alone = sequence_embedding(x[i][mask[i].astype(bool)], None, strategy)
        np.testing.assert_allclose(batch[i], alone, rtol=1e-5, atol=1e-4)


@given(data=batches())
def test_numpy_and_torch_agree_and_padding_values_never_matter(data):
    hidden, mask, _ = data
    noisy = hidden.copy()
    noisy[~mask.astype(bool)] = np.nan  # garbage in padding must not leak
    for strategy in SEQUENCE_STRATEGIES:
        a = sequence_embedding(noisy.astype(np.float32), mask, strategy)
        x = torch.from_numpy(noisy).float().requires_grad_(True)  # the torch namespace path
        t = sequence_embedding(x, torch.from_numpy(mask), strategy)
        np.testing.assert_allclose(a, t.detach().numpy(), rtol=1e-5, atol=1e-5)
        assert np.isfinite(a).all()


def test_concatenation_in_given_order():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    parts = [sequence_embedding(h, mask, s) for s in ("cls", "mean", "max")]
    expected = np.concatenate(parts, axis=-1)
    for spelled in ("cls+mean+max", "cls,mean,max", ["cls", "mean", "max"], ["cls+mean", "max"]):
        np.testing.assert_array_equal(sequence_embedding(h, mask, spelled), expected)


def test_cls_is_first_real_token_under_left_padding():
    h = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0]])
    out = sequence_embedding(h, mask, "cls+last")
    torch.testing.assert_close(out[0], torch.cat([h[0, 2], h[0, 3]]))
    torch.testing.assert_close(out[1], torch.cat([h[1, 0], h[1, 2]]))


def test_weighted_mean_does_not_depend_on_padding_side():
    rng = np.random.default_rng(1)
    tokens = rng.standard_normal((3, 4)).astype(np.float32)
    right = np.zeros((1, 6, 4), np.float32)
    right[0, :3] = tokens
    left = np.zeros((1, 6, 4), np.float32)
    left[0, 3:] = tokens
    a = sequence_embedding(right, np.array([[1, 1, 1, 0, 0, 0]]), "weighted_mean")
    b = sequence_embedding(left, np.array([[0, 0, 0, 1, 1, 1]]), "weighted_mean")
    np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_never_overflows(dtype):
    # float16 tops out at 65504; bfloat16 shares float32's range, so stay inside float32
    big = torch.finfo(dtype).max / 2 if dtype == torch.float16 else 1e30
    h = torch.full((2, 64, 8), big, dtype=dtype)
    h[1, 10:] = -big
    mask = torch.ones(2, 64, dtype=torch.long)
    mask[0, 40:] = 0
    for strategy in SEQUENCE_STRATEGIES:
        out = sequence_embedding(h, mask, strategy)
        assert torch.isfinite(out).all(), strategy
        assert out.dtype == torch.float32
    total = sequence_embedding(h, mask, "sum")
    torch.testing.assert_close(
        total[0], torch.full((8,), 40 * float(h[0, 0, 0])), rtol=1e-3, atol=0
    )
    # max over a row whose masked part is the smallest value must not see the fill
    out = sequence_embedding(-h, mask, "max")
    torch.testing.assert_close(out[0], torch.full((8,), -float(h[0, 0, 0])))


def test_empty_rows_raise_by_default_and_name_the_row():
    h = np.ones((3, 4, 2), np.float32)
    mask = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    with pytest.raises(
        ValueError,
        match=r"Expected `mask` to be a real token in every row .*row\(s\) 1 with no real token.*empty='zeros'",
    ):
        sequence_embedding(h, mask, "mean")
    for strategy in SEQUENCE_STRATEGIES:
        out = sequence_embedding(h, mask, strategy, empty="zeros")
        np.testing.assert_array_equal(out[1], np.zeros(2))
        assert np.abs(out[0]).sum() > 0


def test_rows_with_only_special_tokens_raise_when_excluded():
    h = np.ones((1, 3, 2), np.float32)
    mask = np.array([[1, 1, 0]])
    special = np.array([[1, 1, 0]])
    with pytest.raises(ValueError, match="no real token left after dropping special tokens"):
        sequence_embedding(h, mask, "mean", special_tokens_mask=special, exclude_special=True)
    # cls ignores exclude_special: it is the first real token by definition
    np.testing.assert_array_equal(
        sequence_embedding(h, mask, "cls", special_tokens_mask=special, exclude_special=True),
        h[:, 0],
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"strategy": "avg"},
            ValueError,
            r"Expected `strategy` to be one of cls, mean.*Unknown: avg",
        ),
        ({"strategy": []}, ValueError, r"Expected `strategy` to be a name or a non-empty list"),
        (
            {"mask": np.ones((2, 3))},
            TypeError,
            r"Expected `mask` to be a bool or integer 0/1 array",
        ),
        (
            {"mask": np.full((2, 4), 2)},
            ValueError,
            r"Expected `mask` to be 0/1 values, but got value 2",
        ),
        (
            {"mask": np.ones((2, 5), int)},
            ValueError,
            r"`mask` to be of shape \(2, 4\).*shape \(2, 5\)",
        ),
        (
            {"exclude_special": True},
            ValueError,
            r"`special_tokens_mask` to be given when exclude_special",
        ),
        ({"empty": "nan"}, ValueError, r"`empty` to be 'raise' or 'zeros'"),
    ],
)
def test_error_messages_name_the_argument(kwargs, error, message):
    h = np.ones((2, 4, 3), np.float32)
    with pytest.raises(error, match=message):
        sequence_embedding(h, **kwargs)


def test_hidden_errors():
    with pytest.raises(TypeError, match=r"`hidden` to be a floating point array.*int64"):
        sequence_embedding(np.ones((2, 3), np.int64))
    with pytest.raises(TypeError, match=r"`hidden` to be a NumPy array or a torch tensor.*list"):
        sequence_embedding([[1.0, 2.0]])
    with pytest.raises(
        ValueError, match=r"`hidden` to be of shape \(L, H\) or \(B, L, H\).*\(3,\)"
    ):
        sequence_embedding(np.ones(3, np.float32))
    h = np.ones((1, 3, 2), np.float32)
    h[0, 1, 0] = np.inf
    with pytest.raises(ValueError, match=r"`hidden` to be finite in its real.*row\(s\) \[0\]"):
        sequence_embedding(h, np.array([[1, 1, 0]]), "mean")
    # the same inf in padding is never read
    sequence_embedding(h, np.array([[1, 0, 0]]), "mean")
