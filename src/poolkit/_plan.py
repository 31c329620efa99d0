"""Host-side planning of which positions each row reduces over.

Masks are small ``(B, L)`` arrays, so they are planned in NumPy once; the reductions
over ``(B, L, H)`` hidden states then touch only each row's real segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


# Device-side planning for the vectorised torch path: the same quantities as above, as
# tensors on the hidden states' own device, with a fixed number of operations and no
# host copy, so index planning never synchronises an accelerator.


def row_bounds(keep: Any) -> tuple[Any, Any, Any]:
    """``(first, last, count)`` of each row of a ``(B, L)`` bool tensor, int64 ``(B,)``.

    Empty rows give ``first = L`` and ``last = -1`` (clamp before gathering).
    """
    import torch

    length = keep.shape[1]
    pos = torch.arange(length, device=keep.device)
    first = torch.where(keep, pos, length).amin(dim=1) if length else keep.sum(1) * 0
    last = torch.where(keep, pos, -1).amax(dim=1) if length else keep.sum(1) * 0 - 1
    return first, last, keep.sum(dim=1)


def spans_valid(start: Any, end: Any, padded: Any, length: int, real: Any | None) -> Any:
    """0-d bool tensor: every live span is ``0 <= start <= end < L`` and, with ``real``,
    lies on real tokens only (padded spans count as valid)."""
    import torch

    good = (start >= 0) & (start <= end) & (end < length)
    if real is not None and length:
        prefix = torch.nn.functional.pad(torch.cumsum(real, dim=1), (1, 0))
        s_c, e_c = start.clamp(0, length - 1), end.clamp(0, length - 1)
        inside = prefix.gather(1, e_c + 1) - prefix.gather(1, s_c)
        good = good & (inside == e_c - s_c + 1)
    return (padded | good).all()


def device_word_spans(ids: Any, num_words: int) -> tuple[Any, Any]:
    """Word spans ``(B, W, 2)`` from word ids ``(B, L)`` (-1 = no word), on their device.

    Returns the spans (``[-1, -1]`` for a word without sub-tokens) and a 0-d bool tensor
    that is False when an id is below -1 or >= ``num_words``, or a word's sub-tokens are
    not adjacent (``word_spans`` on the host then names the problem).
    """
    import torch

    b, length = ids.shape
    pos = torch.arange(length, device=ids.device).expand(b, length)
    word = torch.where((ids >= 0) & (ids < num_words), ids, num_words)  # num_words = dump slot
    size = (b, num_words + 1)
    first = torch.full(size, length, device=ids.device).scatter_reduce(1, word, pos, "amin")
    last = torch.full(size, -1, device=ids.device).scatter_reduce(1, word, pos, "amax")
    count = torch.zeros(size, dtype=torch.long, device=ids.device).scatter_add(
        1, word, torch.ones_like(word)
    )
    first, last, count = first[:, :num_words], last[:, :num_words], count[:, :num_words]
    present = count > 0
    spans = torch.where(present[..., None], torch.stack([first, last], dim=-1), -1)
    # every id in -1..num_words-1, and each word's sub-tokens one contiguous run
    in_range = ((ids >= -1) & (ids < num_words)).all()
    adjacent = (~present | (last - first + 1 == count)).all()
    return spans, in_range & adjacent
