"""The :class:`Backend` protocol: what a runtime implements to serve the Encoder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

__all__ = ["Backend"]


class Backend(Protocol):
    """A runtime that maps one padded, tokenized batch to hidden states.

    ``inputs`` holds ``(B, L)`` int64 NumPy arrays: always ``input_ids`` and
    ``attention_mask`` (1 = real token); ``token_type_ids`` (zeros) when the tokenizer
    lists it; ``position_ids`` only for left-padded decoder batches. ``device`` (an
    attribute) names where the hidden states live (``"cpu"``, ``"cuda"``, ...).
    """

    def forward(self, inputs: Mapping[str, np.ndarray], *, all_layers: bool = False) -> Any:
        """Return the last layer ``(B, L, H)``, or with ``all_layers=True`` a tuple of
        ``num_layers + 1`` arrays ``(B, L, H)`` (index 0 = embedding output)."""
        ...
