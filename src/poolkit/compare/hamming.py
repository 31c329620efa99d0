"""Exact Hamming-distance search over packed bits: the binary rows of ``compare --task
retrieval --precision binary``.

:class:`HammingIndex` returns, per query, the ``k`` nearest documents by Hamming distance
in one defined order, whatever the engine: smaller distance first, then the larger
``ties`` value (``compare`` passes the rank of the document ids, trec_eval's rule), then
the smaller document index. Engines: ``"faiss"`` (``faiss-cpu``, in the ``compare``
extra; ``IndexBinaryFlat``, about 5-10x faster per query than the float rows' product,
``bench/bench_budget.py``; asked again for more where distances tie across the ``k``-th
place) and ``"numpy"`` (the distances from a float32 BLAS product of the ±1 signs, exact
integers, blocked as :func:`~poolkit.compare.search.top_k_by`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from poolkit._errors import value_error

__all__ = ["ENGINES", "HammingIndex", "default_engine"]

ENGINES = ("faiss", "numpy")
_SMALL_BATCH = 8  # fewer queries than this: faiss searches on one thread (see _threads)
_SMALL_WORK = 1 << 22  # ... and fewer query x document pairs than this


def _faiss() -> Any | None:
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def default_engine() -> str:
    """``"faiss"`` where ``faiss-cpu`` imports, else ``"numpy"``."""
    return "faiss" if _faiss() is not None else "numpy"


def _raw_bits(packed: np.ndarray, what: str) -> np.ndarray:
    """The packed bits as uint8 ``(N, bytes)``, C-contiguous: ``binary``'s int8 bytes with
    the 128 offset undone (its top bit flipped back), ``ubinary``'s uint8 as they are."""
    a = np.asarray(packed)
    if a.ndim != 2 or a.dtype not in (np.int8, np.uint8):
        value_error(what, "packed bits, int8 (binary) or uint8 (ubinary) of shape (N, bytes)",
                    f"{a.dtype} of shape {a.shape}")  # fmt: skip
    if a.dtype == np.int8:
        a = a.view(np.uint8) ^ np.uint8(0x80)
    return np.ascontiguousarray(a)


@contextlib.contextmanager
def _threads(faiss: Any, n_queries: int, n_docs: int) -> Iterator[None]:
    """faiss splits a search over its queries; a query or a few, or little work (a few
    million pairs: milliseconds), get one thread, so no OpenMP team spins waiting on a
    busy CPU for work that is not there."""
    if n_queries >= _SMALL_BATCH and n_queries * n_docs >= _SMALL_WORK:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class HammingIndex:
    """Exact Hamming search over ``documents`` (packed bits, ``(N, bytes)``).

    ``ties``: ``(N,)`` values, the larger first among equal distances (default: the
    document index, so the later document first, as in ``top_k_by``). ``engine``:
    ``"faiss"``, ``"numpy"`` or None (faiss where installed). Bits past the recipe's width are zero in every packed row, so the
    distance over all ``8 * bytes`` bits is the distance over the width."""

    def __init__(
        self, documents: np.ndarray, ties: np.ndarray | None = None, engine: str | None = None
    ) -> None:
        self.engine = default_engine() if engine is None else engine
        if self.engine not in ENGINES:
            value_error("engine", f"one of {', '.join(ENGINES)}", repr(engine))
        raw = _raw_bits(documents, "documents")
        self.n, self.bits = raw.shape[0], 8 * raw.shape[1]
        order = np.arange(self.n) if ties is None else np.asarray(ties)
        if order.shape != (self.n,):
            value_error("ties", f"one value per document, shape ({self.n},)", str(order.shape))
        # Position in the tie order (0 = first among equal distances), as an int64 key
        # below n: sort key = distance * n + position, unique per document.
        first = np.lexsort((np.arange(self.n), -order))
        self._position = np.empty(self.n, dtype=np.int64)
        self._position[first] = np.arange(self.n)
        if self.engine == "faiss":
            faiss = _faiss()
            if faiss is None:
                value_error("engine", "an installed engine (pip install faiss-cpu)", "'faiss'")
            self._index = faiss.IndexBinaryFlat(self.bits)
            if self.n:
                self._index.add(raw)
        else:
            self._signs = np.unpackbits(raw, axis=1).astype(np.float32) * 2 - 1

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``min(k, N)`` nearest documents of each query, in the order of the module
        docstring: document indices int64 and Hamming distances int64, both ``(Q, k)``."""
        raw = _raw_bits(queries, "queries")
        if raw.shape[1] * 8 != self.bits:
            value_error("queries", f"{self.bits // 8} bytes per row, as the documents",
                        f"{raw.shape[1]}")  # fmt: skip
        k = min(int(k), self.n)
        if k <= 0 or len(raw) == 0:
            empty = np.empty((len(raw), max(k, 0)), dtype=np.int64)
            return empty, empty.copy()
        if self.engine == "faiss":
            return self._search_faiss(raw, k)
        return self._search_numpy(raw, k)

    def _ordered(self, idx: np.ndarray, dist: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        key = dist.astype(np.int64) * self.n + self._position[idx]
        first = np.argsort(key, axis=1)[:, :k]
        return np.take_along_axis(idx, first, axis=1), np.take_along_axis(dist, first, axis=1)

    def _search_faiss(self, raw: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        faiss = _faiss()
        out_i = np.empty((len(raw), k), dtype=np.int64)
        out_d = np.empty((len(raw), k), dtype=np.int64)
        todo = np.arange(len(raw))
        # Ties across the k-th place are common (a few hundred bits, many documents): ask
        # for half as many again, and more only for the queries that need it.
        wide = min(self.n, k + max(16, k // 2))
        while todo.size:
            with _threads(faiss, todo.size, self.n):
                dist, idx = self._index.search(raw[todo], wide)
            dist = dist.astype(np.int64)
            # Every document tied with the k-th is among the `wide` returned when the last
            # one returned is farther than the k-th (or when all N are returned).
            done = np.ones(todo.size, bool) if wide == self.n else dist[:, -1] > dist[:, k - 1]
            out_i[todo[done]], out_d[todo[done]] = self._ordered(idx[done], dist[done], k)
            todo = todo[~done]
            wide = min(self.n, 2 * wide)
        return out_i, out_d

    def _search_numpy(self, raw: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        from poolkit.compare.search import top_k_by

        signs = np.unpackbits(raw, axis=1).astype(np.float32) * 2 - 1
        bits, n, position = self.bits, self.n, self._position

        def scores(q0: int, q1: int, d0: int, d1: int) -> np.ndarray:
            # s_q . s_d = bits - 2 hamming, exact in float32; higher score = smaller key.
            dots = signs[q0:q1] @ self._signs[d0:d1].T
            hamming = (bits - dots.astype(np.int64)) // 2
            return -(hamming * n + position[d0:d1]).astype(np.float64)

        # Keys are unique integers below 2**53: no ties left for top_k_by to break.
        idx, score = top_k_by(scores, len(signs), n, k)
        return idx, (-score).astype(np.int64) // n
