"""One layout for a set of sparse vectors, which every sparse path returns."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["canonical_csr"]


def canonical_csr(matrix: Any) -> Any:
    """``matrix`` as a ``csr_array`` of float32 weights with int32 indices, sorted within
    each row, explicit zeros dropped: one layout for one set of vectors."""
    import scipy.sparse as sp

    out = sp.csr_array(matrix, dtype=np.float32)
    out.eliminate_zeros()
    out.sort_indices()
    out.indices = out.indices.astype(np.int32, copy=False)
    out.indptr = out.indptr.astype(np.int32, copy=False)
    return out
