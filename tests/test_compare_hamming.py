"""compare's exact Hamming search (`poolkit.compare.hamming.HammingIndex`): faiss'
IndexBinaryFlat and the NumPy fallback give the same ranking, tie order included, and both
equal a full sort of every distance by (distance, larger tie value first, index)."""

from __future__ import annotations

import numpy as np
import pytest

from poolkit.compare.hamming import HammingIndex, default_engine
from poolkit.errors import InputError
from poolkit.output import quantize

ENGINES = ["numpy", pytest.param("faiss", marks=pytest.mark.skipif(
    default_engine() != "faiss", reason="faiss-cpu not installed"))]  # fmt: skip


def reference(q: np.ndarray, d: np.ndarray, k: int, ties: np.ndarray | None):
    """Every distance, sorted: smaller first, then larger `ties`, then smaller index."""
    bits_q, bits_d = np.unpackbits(q, axis=1), np.unpackbits(d, axis=1)
    order = np.arange(len(d)) if ties is None else ties
    idx, dist = [], []
    for row in bits_q:
        h = (row[None, :] != bits_d).sum(1)
        first = np.lexsort((np.arange(len(d)), -order, h))[:k]
        idx.append(first)
        dist.append(h[first])
    return np.array(idx, dtype=np.int64), np.array(dist, dtype=np.int64)


def packed(rng, n: int, dims: int, ones: float = 0.5) -> np.ndarray:
    return np.packbits(rng.random((n, dims)) < ones, axis=1)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "n, dims, k, n_queries",
    [(3000, 16, 100, 37), (3000, 16, 400, 3), (500, 60, 10, 1), (50, 8, 50, 20), (7, 24, 30, 9)],
)
def test_matches_a_full_sort_with_ties(engine, n, dims, k, n_queries) -> None:
    """Few bits, many documents: ties across the k-th place in almost every query."""
    rng = np.random.default_rng(n + dims + k)
    d, q = packed(rng, n, dims), packed(rng, n_queries, dims)
    ties = rng.permutation(n)
    index = HammingIndex(d, ties, engine=engine)
    idx, dist = index.search(q, k)
    ref_i, ref_d = reference(q, d, min(k, n), ties)
    assert idx.dtype == dist.dtype == np.int64
    np.testing.assert_array_equal(dist, ref_d)
    np.testing.assert_array_equal(idx, ref_i)
    # No ties given: the document index breaks them, the later first (as top_k_by).
    idx, _ = HammingIndex(d, engine=engine).search(q, k)
    np.testing.assert_array_equal(idx, reference(q, d, min(k, n), None)[0])


@pytest.mark.skipif(default_engine() != "faiss", reason="faiss-cpu not installed")
def test_faiss_and_numpy_identical_on_stored_binary_and_ubinary() -> None:
    rng = np.random.default_rng(0)
    d = rng.standard_normal((4000, 64)).astype(np.float32)
    q = rng.standard_normal((70, 64)).astype(np.float32)
    d[2000:2100] = d[:100]  # exact duplicates: distance ties by construction
    ties = rng.permutation(len(d))
    results = {}
    for precision in ("binary", "ubinary"):
        ds, qs = quantize(d, precision), quantize(q, precision)
        for engine in ("faiss", "numpy"):
            results[precision, engine] = HammingIndex(ds, ties, engine=engine).search(qs, 100)
    first = results["binary", "faiss"]
    for got in results.values():
        np.testing.assert_array_equal(got[0], first[0])
        np.testing.assert_array_equal(got[1], first[1])


def test_bad_input_one_line() -> None:
    with pytest.raises(InputError, match="packed bits"):
        HammingIndex(np.zeros((3, 4), np.float32))
    with pytest.raises(InputError, match="engine"):
        HammingIndex(np.zeros((3, 4), np.uint8), engine="annoy")
    index = HammingIndex(np.zeros((3, 4), np.uint8), engine="numpy")
    with pytest.raises(InputError, match="4 bytes per row"):
        index.search(np.zeros((1, 2), np.uint8), 1)
    idx, dist = index.search(np.zeros((2, 4), np.uint8), 0)
    assert idx.shape == dist.shape == (2, 0)
