"""word_embeddings, token_embeddings and layer_mix against plain loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from poolkit import (
    WORD_STRATEGIES,
    flat_token_embeddings,
    layer_mix,
    token_embeddings,
    word_embeddings,
)


@st.composite
def word_batches(draw: st.DrawFn):
    """(hidden, word_ids lists with None) shaped like a fast tokenizer's output."""
    b = draw(st.integers(1, 4))
    rows, longest = [], 0
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    for _ in range(b):
        pieces = rng.integers(1, 4, size=rng.integers(0, 5))  # sub-tokens per word
        ids = [None] + [w for w, n in enumerate(pieces) for _ in range(n)] + [None]
        rows.append(ids)
        longest = max(longest, len(ids))
    rows = [r + [None] * (longest - len(r)) for r in rows]
    hidden = rng.standard_normal((b, longest, draw(st.integers(1, 4)))).astype(np.float32)
    return hidden, rows


def word_reference(hidden: np.ndarray, ids: list, strategy: str, n_words: int) -> np.ndarray:
    out = []
    for w in range(n_words):
        toks = hidden[[i for i, x in enumerate(ids) if x == w]].astype(np.float64)
        if len(toks) == 0:
            dim = hidden.shape[-1] * (2 if strategy == "endpoints" else 1)
            out.append(np.zeros(dim))
            continue
        out.append(
            {
                "first": toks[0],
                "last": toks[-1],
                "mean": toks.mean(0),
                "max": toks.max(0),
                "endpoints": np.concatenate([toks[0], toks[-1]]),
            }[strategy]
        )
    return np.stack(out) if out else np.zeros((0, 1))


@pytest.mark.parametrize("kind", ["numpy", "torch", "torch_autograd"])
@pytest.mark.parametrize("strategy", list(WORD_STRATEGIES))
@given(data=word_batches())
def test_words_match_reference(kind, strategy, data):
    hidden, ids = data
    arg = (
        torch.from_numpy(hidden).requires_grad_(kind == "torch_autograd")
        if kind != "numpy"
        else hidden
    )
    out = word_embeddings(arg, ids, strategy)
    out = out.detach().numpy() if kind != "numpy" else out
    n_words = max([x for r in ids for x in r if x is not None], default=-1) + 1
    assert out.shape[:2] == (len(ids), n_words)
    for b, row in enumerate(ids):
        if n_words:
            np.testing.assert_allclose(
                out[b], word_reference(hidden[b], row, strategy, n_words), rtol=1e-6, atol=1e-6
            )


def test_words_without_subtokens_are_zero_and_num_words_keeps_them():
    h = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = np.array([-1, 0, 0, 2, 2, -1])  # word 1 has no sub-token, word 3 was truncated away
    out = word_embeddings(h, ids, "mean", num_words=4)
    np.testing.assert_array_equal(out, [[3, 4], [0, 0], [7, 8], [0, 0]])


def test_word_errors():
    h = np.ones((4, 2), np.float32)
    with pytest.raises(
        ValueError, match=r"sub-tokens of word 0 are not adjacent \(positions 0, 2\)"
    ):
        word_embeddings(h, [0, 1, 0, None])
    with pytest.raises(
        ValueError, match=r"Expected `word_ids` to be of shape \(L,\) or \(B, L\) with L = 4"
    ):
        word_embeddings(h, [0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"Expected `strategy` to be one of first, last"):
        word_embeddings(h, [0, 1, 2, 3], "avg")
    with pytest.raises(ValueError, match=r"`num_words` to be an int >= 4"):
        word_embeddings(h, [0, 1, 2, 3], num_words=2)
    with pytest.raises(TypeError, match=r"`word_ids` to be integers"):
        word_embeddings(h, np.array([0.0, 1, 2, 3]))
    with pytest.raises(ValueError, match=r"`word_ids` to be word indices >= 0"):
        word_embeddings(h, [0, -3, 2, 3])
    with pytest.raises(ValueError, match=r"`word_ids` to be batched exactly like `hidden`"):
        word_embeddings(h, [[0, 1, 2, 3]])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_tokens_drop_special_and_padding(kind):
    rng = np.random.default_rng(0)
    h = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    special = np.array([[1, 0, 0, 1, 0], [0, 0, 1, 0, 1], [0, 0, 0, 0, 0]])
    arg = torch.from_numpy(h) if kind == "torch" else h
    per_row = token_embeddings(arg, special, mask)
    vectors, rows, positions = flat_token_embeddings(arg, special, mask)
    expected = [h[0, [1, 2]], h[1, [3]], h[2, []]]
    for got, want in zip(per_row, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(rows, [0, 0, 1])
    np.testing.assert_array_equal(positions, [1, 2, 3])
    np.testing.assert_array_equal(np.asarray(vectors), np.concatenate(expected))


def test_tokens_unbatched_and_errors():
    h = np.ones((8, 256), np.float32)
    assert token_embeddings(h).shape == (8, 256)
    with pytest.raises(ValueError, match=r"`special_tokens_mask` to be of shape \(8,\)"):
        token_embeddings(h, np.zeros(7, bool))


def test_layer_mix_presets():
    rng = np.random.default_rng(0)
    states = [rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(7)]
    np.testing.assert_array_equal(layer_mix(states, "last"), states[-1])
    np.testing.assert_allclose(layer_mix(states, "last4"), np.mean(states[3:], axis=0), rtol=1e-6)
    np.testing.assert_allclose(
        layer_mix(states, "first_last"), (states[1] + states[6]) / 2, rtol=1e-6
    )
    np.testing.assert_array_equal(
        layer_mix(states, [0, -1], "concat"), np.concatenate([states[0], states[6]], -1)
    )
    np.testing.assert_allclose(layer_mix(np.stack(states), 2, "sum"), states[2])
    half = [torch.from_numpy(s).half() for s in states]
    assert layer_mix(half, "last4").dtype == torch.float32


def test_layer_mix_errors():
    states = [np.ones((2, 3, 4), np.float32)] * 3
    with pytest.raises(ValueError, match=r"`layers` to be indices in -3..2"):
        layer_mix(states, [5])
    with pytest.raises(ValueError, match=r"`layers` to be one of last, last4"):
        layer_mix(states, "top")
    with pytest.raises(ValueError, match=r"`how` to be one of mean, sum, concat"):
        layer_mix(states, "last", "max")
    with pytest.raises(ValueError, match=r"layer 1 of shape \(2, 3, 5\)"):
        layer_mix([states[0], np.ones((2, 3, 5), np.float32)])
