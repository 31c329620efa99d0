"""word_embeddings, token_embeddings and layer_mix against plain loops, for every input kind
and dtype through the shared tester."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tester import KINDS_DTYPES, as_kind, check_rule, to_f64

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


@pytest.mark.parametrize(("kind", "dtype"), KINDS_DTYPES)
@pytest.mark.parametrize("strategy", list(WORD_STRATEGIES))
@given(data=word_batches())
def test_words_match_reference(kind, dtype, strategy, data):
    hidden, ids = data
    n_words = max([x for r in ids for x in r if x is not None], default=-1) + 1
    width = hidden.shape[-1] * (2 if strategy == "endpoints" else 1)

    def reference(h: np.ndarray) -> np.ndarray:
        if not n_words:
            return np.zeros((len(ids), 0, width))
        return np.stack([word_reference(h[b], row, strategy, n_words) for b, row in enumerate(ids)])

    got = check_rule(lambda x: word_embeddings(x, ids, strategy), reference, hidden, kind, dtype)
    assert got.shape == (len(ids), n_words, width)


def test_words_without_subtokens_are_zero_and_num_words_keeps_them():
    h = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = np.array([-1, 0, 0, 2, 2, -1])  # word 1 has no sub-token, word 3 was truncated away
    out = word_embeddings(h, ids, "mean", num_words=4)
    np.testing.assert_array_equal(out, [[3, 4], [0, 0], [7, 8], [0, 0]])


def test_word_errors():
    h = np.ones((4, 2), np.float32)
    with pytest.raises(
        ValueError,
        match=r"Expected `word_ids` to be adjacent sub-tokens for each word, but got those of word 0 at positions 0, 2\.",
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


@pytest.mark.parametrize(("kind", "dtype"), KINDS_DTYPES)
def test_tokens_drop_special_and_padding(kind, dtype):
    rng = np.random.default_rng(0)
    h = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    special = np.array([[1, 0, 0, 1, 0], [0, 0, 1, 0, 1], [0, 0, 0, 0, 0]])
    kept = [[1, 2], [3], []]  # by hand: real, non-special positions of each row

    def rows_reference(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x[b, k] for b, k in enumerate(kept)])

    flat = check_rule(lambda x: flat_token_embeddings(x, special, mask)[0], rows_reference, h,
                      kind, dtype, out_kind=False)  # fmt: skip
    assert flat.shape == (3, 4)
    x = as_kind(h, kind, dtype)
    per_row = token_embeddings(x, special, mask)
    _, rows, positions = flat_token_embeddings(x, special, mask)
    for b, (got, k) in enumerate(zip(per_row, kept, strict=True)):
        np.testing.assert_array_equal(to_f64(got), to_f64(x)[b, k])
    np.testing.assert_array_equal(rows, [0, 0, 1])
    np.testing.assert_array_equal(positions, [1, 2, 3])


def test_tokens_unbatched_and_errors():
    h = np.ones((8, 256), np.float32)
    assert token_embeddings(h).shape == (8, 256)
    with pytest.raises(ValueError, match=r"`special_tokens_mask` to be of shape \(8,\)"):
        token_embeddings(h, np.zeros(7, bool))


@pytest.mark.parametrize(("kind", "dtype"), KINDS_DTYPES)
@pytest.mark.parametrize(
    ("layers", "how", "reference"),
    [
        ("last", "mean", lambda s: s[-1]),
        ("last4", "mean", lambda s: s[3:].mean(0)),
        ("first_last", "mean", lambda s: (s[1] + s[6]) / 2),
        ([0, -1], "concat", lambda s: np.concatenate([s[0], s[6]], -1)),
        (2, "sum", lambda s: s[2]),
        ([1, 2, 3], "sum", lambda s: s[1] + s[2] + s[3]),
    ],
)
def test_layer_mix_matches_reference(kind, dtype, layers, how, reference):
    states = np.random.default_rng(0).standard_normal((7, 2, 3, 4)).astype(np.float32)
    check_rule(lambda x: layer_mix(list(x), layers, how), reference, states, kind, dtype)


def test_layer_mix_takes_a_stacked_array():
    states = np.random.default_rng(1).standard_normal((7, 2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(layer_mix(states, [2, 4], "sum"), states[2] + states[4], rtol=1e-6)


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
