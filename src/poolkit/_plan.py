"""Host-side planning of which positions each row reduces over.

Masks are small ``(B, L)`` arrays, so they are planned in NumPy once; the reductions
over ``(B, L, H)`` hidden states then touch only each row's real segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowPlan:
    """Where each row's selected tokens sit. All arrays have shape ``(B,)``, int64.

    ``first``/``last`` bound the selected tokens (inclusive); ``count`` is how many are
    selected; ``holes`` marks rows whose selected tokens are not one contiguous run (for
    example special tokens dropped from the middle), for which ``keep`` is needed.
    """

    keep: np.ndarray  # (B, L) bool
    first: np.ndarray
    last: np.ndarray
    count: np.ndarray
    holes: np.ndarray  # (B,) bool

    @property
    def empty(self) -> np.ndarray:
        return self.count == 0

    @property
    def uniform(self) -> bool:
        """True when every row selects the same contiguous run: one vectorised call."""
        return (
            len(self.count) > 0
            and not self.empty.any()
            and not self.holes.any()
            and bool((self.first == self.first[0]).all() and (self.last == self.last[0]).all())
        )


def plan_rows(keep: np.ndarray) -> RowPlan:
    """Plan the reduction of each row of a ``(B, L)`` bool mask."""
    length = keep.shape[1]
    count = keep.sum(axis=1).astype(np.int64)
    if length == 0:
        first, last = np.zeros_like(count), np.full_like(count, -1)
    else:
        first = np.where(count > 0, keep.argmax(axis=1), 0).astype(np.int64)
        last = np.where(count > 0, length - 1 - keep[:, ::-1].argmax(axis=1), -1).astype(np.int64)
    holes = (count > 0) & (last - first + 1 != count)
    return RowPlan(keep=keep, first=first, last=last, count=count, holes=holes)
