"""Sparse vectors in files: how a CSR part is written to each output format and to a
checkpoint part. :mod:`poolkit.io.writers` and :mod:`poolkit.io.checkpoint` call these
for a column whose arrays are sparse; dense columns never reach them.

- ``.npz``: the file ``scipy.sparse.save_npz`` writes for a ``csr_array`` (``data``
  float32, ``indices`` int32, ``indptr`` int64, ``shape``, ``format``), uncompressed, with
  fixed member dates so that the same vectors give the same bytes; ``scipy.sparse.load_npz``
  reads it. Written part by part: the weights wait in temporary files, not in memory.
- ``.parquet``: per sparse column two list columns, ``<name>_indices`` (int32 term ids,
  ascending) and ``<name>_values`` (float32 weights).
- ``.jsonl``: ``"<name>": {"indices": [...], "values": [...]}`` per row.
"""

from __future__ import annotations

import io
import itertools
import tempfile
import zipfile
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from poolkit._version import __version__

__all__ = [
    "NpzParts",
    "is_sparse",
    "jsonl_values",
    "parquet_columns",
    "part_arrays",
    "part_from",
    "sparse_record",
]

_DATE = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: no clock in the bytes


def is_sparse(value: Any) -> bool:
    """Whether ``value`` is a scipy sparse array (a sparse column's part)."""
    import scipy.sparse as sp

    return sp.issparse(value)


def jsonl_values(matrix: Any) -> list[dict[str, list[Any]]]:
    """Per row of CSR ``matrix``: ``{"indices": [...], "values": [...]}``."""
    indptr = matrix.indptr.tolist()
    ids, weights = matrix.indices.tolist(), matrix.data.astype(np.float32).tolist()
    return [{"indices": ids[a:b], "values": weights[a:b]} for a, b in itertools.pairwise(indptr)]


def parquet_columns(name: str, matrix: Any) -> list[tuple[str, Any]]:
    """The two Parquet list columns of CSR ``matrix``: ``(column name, pyarrow array)``."""
    import pyarrow as pa

    offsets = pa.array(matrix.indptr.astype(np.int32), pa.int32())
    ids = pa.ListArray.from_arrays(offsets, pa.array(matrix.indices.astype(np.int32)))
    weights = pa.ListArray.from_arrays(offsets, pa.array(matrix.data.astype(np.float32)))
    return [(f"{name}_indices", ids), (f"{name}_values", weights)]


def sparse_record(recipes: Mapping[str, Any], widths: Mapping[str, int]) -> dict[str, Any]:
    """What each sparse column is, as ``poolkit embed`` records it with the vectors (a
    Parquet file's metadata under ``poolkit``, the JSON beside other formats): its recipe
    and vocabulary width (``widths``: column -> V)."""
    columns = {name: {"recipe": str(r), "recipe_json": r.to_json(), "kind": "sparse",
                      "vocab_size": widths[name], "top_k": r.top_k}
               for name, r in recipes.items()}  # fmt: skip
    return {"poolkit": __version__, "columns": columns}


def part_arrays(key: str, matrix: Any) -> dict[str, np.ndarray]:
    """CSR ``matrix`` as the plain arrays a checkpoint part stores under ``key``."""
    return {f"{key}_indptr": matrix.indptr.astype(np.int64), f"{key}_indices": matrix.indices,
            f"{key}_data": matrix.data, f"{key}_shape": np.asarray(matrix.shape, np.int64)}  # fmt: skip


def part_from(z: Any, key: str) -> Any:
    """The CSR array :func:`part_arrays` stored under ``key`` in an open ``.npz``, or
    ``None`` when ``key`` holds no sparse column."""
    if f"{key}_indptr" not in z.files:
        return None
    import scipy.sparse as sp

    from poolkit.sparse.csr import canonical_csr

    shape = tuple(int(x) for x in z[f"{key}_shape"])
    parts = (z[f"{key}_data"], z[f"{key}_indices"], z[f"{key}_indptr"])
    return canonical_csr(sp.csr_array(parts, shape=shape))


class NpzParts:
    """A ``.npz`` of one CSR matrix, built part by part: rows are appended with :meth:`add`
    (weights and term ids spooled to temporary files in ``folder``), :meth:`write` writes
    the archive once the row count is known."""

    def __init__(self, folder: Any) -> None:
        self._data: IO[bytes] = tempfile.TemporaryFile(dir=folder)
        self._indices: IO[bytes] = tempfile.TemporaryFile(dir=folder)
        self._indptr = [np.zeros(1, np.int64)]
        self._nnz = 0
        self.rows = 0
        self.width: int | None = None

    def add(self, matrix: Any) -> None:
        """Append the rows of CSR ``matrix`` (float32 weights, sorted indices)."""
        self.width = int(matrix.shape[1]) if self.width is None else self.width
        self._data.write(matrix.data.astype(np.float32).tobytes())
        self._indices.write(matrix.indices.astype(np.int32).tobytes())
        self._indptr.append(matrix.indptr[1:].astype(np.int64) + self._nnz)
        self._nnz += int(matrix.nnz)
        self.rows += int(matrix.shape[0])

    def write(self, out: IO[bytes], width: int | None = None) -> None:
        """Write the archive to ``out`` (``width``: the columns when no row came)."""
        shape = np.asarray([self.rows, self.width or width or 0], np.int64)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            self._member(z, "indices", self._indices, np.dtype(np.int32), self._nnz)
            self._member(z, "indptr", None, None, np.concatenate(self._indptr))
            self._member(z, "format", None, None, np.asarray(b"csr"))
            self._member(z, "shape", None, None, shape)
            self._member(z, "data", self._data, np.dtype(np.float32), self._nnz)
            self._member(z, "_is_array", None, None, np.asarray(True))
        self.close()

    @staticmethod
    def _member(z: zipfile.ZipFile, name: str, spool: IO[bytes] | None, dtype: Any,
                value: Any) -> None:  # fmt: skip
        """One ``.npy`` member: ``value`` itself, or ``value`` items of ``dtype`` from ``spool``."""
        from numpy.lib import format as npy

        info = zipfile.ZipInfo(f"{name}.npy", date_time=_DATE)
        with z.open(info, "w", force_zip64=True) as f:
            if spool is None:
                buffer = io.BytesIO()
                npy.write_array(buffer, np.asarray(value), allow_pickle=False)
                f.write(buffer.getvalue())
                return
            header = {"descr": npy.dtype_to_descr(dtype), "fortran_order": False,
                      "shape": (int(value),)}  # fmt: skip
            npy.write_array_header_1_0(f, header)
            spool.seek(0)
            while block := spool.read(1 << 20):
                f.write(block)

    def close(self) -> None:
        """Drop the temporary files."""
        self._data.close()
        self._indices.close()
