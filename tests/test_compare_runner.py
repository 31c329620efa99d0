"""Candidates of `poolkit compare` against plain per-row references; span lookup errors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from reference import sequence_reference

from poolkit import Recipe
from poolkit.compare.candidates import candidates, default_strategies
from poolkit.compare.datasets import DataError
from poolkit.compare.runner import _token_spans
from poolkit.driver import LayerViews, sequence_vectors


@dataclass
class Batch:
    """The fields of an EncodedBatch that sequence pooling reads (plain data)."""

    hidden: np.ndarray
    attention_mask: np.ndarray
    special_tokens_mask: np.ndarray
    indices: np.ndarray
    hidden_states: tuple[np.ndarray, ...] | None = None


def l2(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_sequence_vectors_match_row_by_row_reference():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 6, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    special = np.array([[1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 1], [1, 0, 1, 0, 0, 0]], bool)
    batch = Batch(hidden, mask, special, np.arange(3))
    recipes = candidates("sequence", default_strategies("sequence"), None)
    out = {str(r): v for r, v in sequence_vectors(LayerViews(batch), recipes,
                                                 model_normalize=False).items()}  # fmt: skip
    for name in ("cls", "mean", "max", "min", "sum", "mean_sqrt_len", "weighted_mean", "last"):
        np.testing.assert_allclose(out[name], sequence_reference(hidden, mask, name), atol=1e-5)
    np.testing.assert_allclose(
        out["mean_no_special"], sequence_reference(hidden, mask, "mean", special), atol=1e-5
    )
    # Concatenations against the reference pieces, not against the code's own outputs.
    for joined in ("cls+mean", "mean+max"):
        want = np.concatenate([sequence_reference(hidden, mask, p) for p in joined.split("+")], 1)
        np.testing.assert_allclose(out[joined], want, atol=1e-5)
    assert all(v.dtype == np.float32 for v in out.values())
    # A model that normalises: every recipe with normalize unset is L2-normalised as a whole.
    normed = sequence_vectors(LayerViews(batch), [Recipe("cls+mean")], model_normalize=True)
    want = l2(np.concatenate([sequence_reference(hidden, mask, p) for p in ("cls", "mean")], 1))
    np.testing.assert_allclose(normed[Recipe("cls+mean")], want, atol=1e-5)
    raw = sequence_vectors(LayerViews(batch), [Recipe.parse("mean/raw")], model_normalize=True)
    np.testing.assert_allclose(raw[Recipe("mean", normalize=False)], sequence_reference(hidden, mask, "mean"),
                               atol=1e-5)  # fmt: skip


def test_candidates_order_layers_and_errors():
    got = candidates("word", ["first", "mean"], ["last", "last4"])
    assert got == [
        Recipe("first", level="word"), Recipe("first", level="word", layers="last4"),
        Recipe("mean", level="word"), Recipe("mean", level="word", layers="last4"),
    ]  # fmt: skip
    assert [str(c) for c in got] == [
        "word:first",
        "word:first@last4",
        "word:mean",
        "word:mean@last4",
    ]
    assert [c.strategy for c in candidates("span", None, None)] == [
        "endpoints", "mean", "max", "diff_sum", "attention", "x,y,x*y",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"`recipe` to be one of cls, mean.* 'cls\+avg'"):
        candidates("sequence", ["cls+avg"], None)
    with pytest.raises(ValueError, match=r"`layers` to be one of last, last4, first_last, sec"):
        candidates("sequence", None, ["all"])
    with pytest.raises(ValueError, match=r"`strategies` to be word-level recipes"):
        candidates("word", ["span:mean"], None)


def test_token_spans_inclusive_and_error_names_the_row():
    offsets = np.array([[0, 0], [0, 4], [5, 10], [11, 13], [13, 14], [0, 0]])
    valid = np.array([False, True, True, True, True, False])
    spans = np.array([[0, 4], [11, 14]])
    assert _token_spans(offsets, valid, spans, "f:1").tolist() == [[1, 1], [3, 4]]
    with pytest.raises(
        DataError,
        match=r"^f:7: Expected span 2 \[4, 5\) to cover a token of the text, but it covers none\.$",
    ):
        _token_spans(offsets, valid, np.array([[0, 4], [4, 5]]), "f:7")
