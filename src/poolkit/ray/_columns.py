"""The vectors of one :class:`~poolkit.ray.Embedder` batch as Arrow columns, per kind, in the
types ``poolkit embed`` writes to Parquet (:mod:`poolkit.io.writers`), so that a Ray shard's
rows and a local ``.parquet`` file's rows compare column for column:

- dense (a MUVERA recipe included): ``fixed_size_list<float32>[D]``;
- sparse: ``<name>_indices`` ``list<int32>`` and ``<name>_values`` ``list<float32>``;
- multi-vector: ``large_list<fixed_size_list<float32>[D]>``, one ``(tokens, D)`` array a row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dense_column", "ragged_column", "sparse_columns"]


def dense_column(vectors: np.ndarray) -> Any:
    """``(B, D)`` vectors as ``fixed_size_list<dtype>[D]`` (float32 unless stored as float16,
    int8 or uint8)."""
    import pyarrow as pa

    from poolkit.io.writers import stored

    arr = stored(np.asarray(vectors))
    flat = pa.array(arr.reshape(-1), pa.from_numpy_dtype(arr.dtype))
    return pa.FixedSizeListArray.from_arrays(flat, arr.shape[1])


def ragged_column(arrays: list[np.ndarray], width: int) -> Any:
    """One ``(tokens_i, width)`` array per row as ``large_list<fixed_size_list[width]>``."""
    from poolkit.io.writers import ragged_array, stored

    if not arrays:
        return ragged_array(np.zeros((0, width), np.float32), np.zeros(1, np.int64))
    flat = stored(np.concatenate(arrays))
    offsets = np.r_[0, np.cumsum([len(a) for a in arrays])].astype(np.int64)
    return ragged_array(flat, offsets)


def sparse_columns(name: str, matrix: Any) -> list[tuple[str, Any]]:
    """A ``(B, V)`` sparse array as its two list columns, ``(column name, array)``."""
    from poolkit.sparse import canonical_csr
    from poolkit.sparse.files import parquet_columns

    return parquet_columns(name, canonical_csr(matrix))
