"""The equality promises of docs/equality.md, as the tests check them: one helper each.

Two runs that put every text in the same batch, on one machine, give the same bits
(:func:`assert_same_bits`). Two runs that batch differently (the library call against
``--part-size``, one text against many, local against Ray, ONNX against torch, 1 thread
against 2) differ by float rounding: the CPU's kernels block their sums by the padded
shape, and how they block depends on the CPU (an AVX2-only EPYC differs where a Xeon with
AVX-512 happens to agree). That difference is held to :data:`BOUND`, relative to each
vector's largest value (:func:`assert_within_bound`); a top-k sparse vector may keep
another entry only where the k-th value is within the bound of it
(:func:`assert_sparse_within_bound`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "BOUND",
    "RUNTIME_BOUND",
    "assert_same_bits",
    "assert_sparse_within_bound",
    "assert_within_bound",
]

# docs/equality.md#the-bound: the largest difference measured between batchings on a Xeon
# (AVX-512) and with torch held to AVX2 is below 2e-7 on unit vectors
# (tests/test_batch_composition.py prints it); 1e-6 leaves room for the EPYC's kernels.
BOUND = 1e-6
# docs/equality.md#within-the-bound: another runtime (ONNX Runtime, OpenVINO, an exported
# folder) against torch: its own kernels and fused operators.
RUNTIME_BOUND = 1e-5


def _dense(x: Any) -> np.ndarray:
    return np.asarray(x.toarray() if hasattr(x, "toarray") else x, dtype=np.float64)


def _scale(want: np.ndarray) -> np.ndarray:
    """Per row: the bound's unit, the row's largest magnitude (at least 1)."""
    return np.maximum(np.abs(want).max(axis=-1, keepdims=True, initial=0.0), 1.0)


def worst(got: Any, want: Any) -> float:
    """The largest difference of ``got`` from ``want``, in units of each row's scale."""
    g, w = _dense(got), _dense(want)
    return float((np.abs(g - w) / _scale(w)).max()) if w.size else 0.0


def assert_same_bits(got: Any, want: Any, what: str = "") -> None:
    """Equal shapes and bytes: the promise for runs that batch alike on one machine."""
    g, w = _dense(got), _dense(want)  # float64 holds every float32 and int8 exactly
    assert g.shape == w.shape, (what, g.shape, w.shape)
    np.testing.assert_array_equal(g, w, err_msg=f"{what}: not the same bits (docs/equality.md)")


def assert_within_bound(got: Any, want: Any, what: str = "") -> None:
    """Every value within :data:`BOUND` of ``want``'s row scale: the promise across
    batchings (dense vectors, untruncated sparse ones, token vectors)."""
    g, w = _dense(got), _dense(want)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    largest = worst(g, w)
    assert largest <= BOUND, f"{what}: {largest:.3g} > {BOUND} (docs/equality.md)"


def assert_sparse_within_bound(got: Any, want: Any, k: int, what: str = "") -> None:
    """Top-``k`` sparse rows across batchings: the values both keep within the bound; an
    entry kept by one only where it is within the bound of that row's k-th value (the
    cut fell between near-equal entries)."""
    g, w = _dense(got), _dense(want)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    tol = BOUND * _scale(w)
    both = (g != 0) & (w != 0)
    assert np.all(np.abs(g - w)[both] <= np.broadcast_to(tol, g.shape)[both]), (
        f"{what}: kept values differ by more than the bound (docs/equality.md)"
    )
    for r in range(g.shape[0]):
        for row, other in ((g[r], w[r]), (w[r], g[r])):
            only = (row != 0) & (other == 0)
            if not only.any():
                continue
            kth = np.sort(np.abs(other))[::-1][min(k, other.size) - 1]
            assert np.all(np.abs(np.abs(row[only]) - kth) <= tol[r, 0]), (
                f"{what}: row {r} keeps an entry far from the k-th value (docs/equality.md)"
            )
