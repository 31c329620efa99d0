"""Sequence vectors of `poolkit compare`: every candidate recipe for a list of texts.

The scorers of every sequence task (:mod:`.runner`, :mod:`.retrieval`, :mod:`.clustering`)
embed through here, so each scores the vectors ``poolkit embed --recipe NAME`` writes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from poolkit.recipe import Recipe

__all__ = ["embed_sequences", "progress"]


def embed_sequences(
    encoder: Any, texts: Sequence[str], cands: Sequence[Recipe], settings: Any, desc: str
) -> dict[Recipe, np.ndarray]:
    """Every sequence candidate for ``texts``: float32 ``(N, D_c)`` in input order, as
    :func:`poolkit.embed` gives them (normalised as the recipe says, else as the model).

    Texts over the encoder's max length are truncated (the model's intended use; the
    count goes to ``settings.notes``) or, with ``settings.long_text="window"``, embedded in
    overlapping windows and pooled over all their tokens. A row left with no token after
    dropping special tokens gives zeros for ``_no_special`` parts (``embed`` refuses it).
    """
    from poolkit.embedding import embed_recipes

    named = {str(c): c for c in cands}
    with progress(settings, desc, len(texts), "text") as bar:
        vectors, stats = embed_recipes(
            list(texts), encoder, named, long_text=settings.long_text, progress=bar.update,
            empty="zeros",
        )  # fmt: skip
    if stats.num_truncated:
        settings.notes.append(
            f"{desc}: {stats.num_truncated} of {len(texts)} texts truncated at "
            f"{encoder.max_length} tokens."
        )
    return {c: vectors[name] for name, c in named.items()}


def progress(settings: Any, desc: str, total: int, unit: str) -> Any:
    """A tqdm bar on stderr; hidden with ``settings.quiet`` or when stderr is not a terminal."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
        disable=True if settings.quiet else None, dynamic_ncols=True,
    )  # fmt: skip
