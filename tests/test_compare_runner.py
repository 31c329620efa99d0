"""Candidates of `poolkit compare` against plain per-row references; span lookup errors."""

from __future__ import annotations

import numpy as np
import pytest
from reference import sequence_reference

from poolkit.compare.candidates import Candidate, candidates, default_strategies, sequence_vectors
from poolkit.compare.datasets import DataError
from poolkit.compare.runner import _token_spans


def test_sequence_vectors_match_row_by_row_reference():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 6, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    special = np.array([[1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 1], [1, 0, 1, 0, 0, 0]], bool)
    out = sequence_vectors(hidden, mask, special, default_strategies("sequence"))
    for name in ("cls", "mean", "max", "min", "sum", "mean_sqrt_len", "weighted_mean", "last"):
        np.testing.assert_allclose(out[name], sequence_reference(hidden, mask, name), atol=1e-5)
    np.testing.assert_allclose(
        out["mean_no_special"], sequence_reference(hidden, mask, "mean", special), atol=1e-5
    )
    np.testing.assert_allclose(
        out["cls+mean"], np.concatenate([out["cls"], out["mean"]], axis=1), atol=0
    )
    assert all(v.dtype == np.float32 for v in out.values())


def test_candidates_order_layers_and_errors():
    got = candidates("word", ["first", "mean"], ["last", "last4"])
    assert got == [
        Candidate("first", "last"), Candidate("first", "last4"),
        Candidate("mean", "last"), Candidate("mean", "last4"),
    ]  # fmt: skip
    assert [c.strategy for c in candidates("span", None, None)] == [
        "endpoints", "mean", "max", "diff_sum", "attention", "x,y,x*y",
    ]  # fmt: skip
    with pytest.raises(
        ValueError, match=r"`--strategies` to name sequence strategies .* 'cls\+avg'"
    ):
        candidates("sequence", ["cls+avg"], None)
    with pytest.raises(ValueError, match=r"`--layers` to be among last, last4, first_last"):
        candidates("sequence", None, ["all"])


def test_token_spans_inclusive_and_error_names_the_row():
    offsets = np.array([[0, 0], [0, 4], [5, 10], [11, 13], [13, 14], [0, 0]])
    valid = np.array([False, True, True, True, True, False])
    spans = np.array([[0, 4], [11, 14]])
    assert _token_spans(offsets, valid, spans, "f:1").tolist() == [[1, 1], [3, 4]]
    with pytest.raises(DataError, match=r"^f:7: span 2 \[4, 5\) covers no token of the text\.$"):
        _token_spans(offsets, valid, np.array([[0, 4], [4, 5]]), "f:7")
