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


# ``prompt_name`` left out: the settings' (``--prompt-name``); ``None``: the model's default.
SETTINGS_PROMPT: Any = object()


def embed_sequences(
    encoder: Any,
    texts: Sequence[str],
    cands: Sequence[Recipe],
    settings: Any,
    desc: str,
    prompt_name: str | None = SETTINGS_PROMPT,
    long_text: str | None = None,
    tap: Any = None,
) -> tuple[dict[Recipe, np.ndarray], Any]:
    """Every sequence candidate for ``texts``: float32 ``(N, D_c)`` in input order, as
    :func:`poolkit.embed` gives them, and the run's :class:`~poolkit.driver.EmbedStats`.

    The model's modules after pooling apply to every candidate whose width they take; the
    others are scored pooled, and a note names them. ``prompt_name``: left out, the
    settings'. Texts past the max length are truncated (counted in ``settings.notes``) or,
    with ``long_text`` ``"window"``, pooled over windows. A text with no token left after
    dropping special tokens gives zeros. ``tap(batch)`` sees every forward batch.
    """
    from poolkit.plan import make_plan

    named = {str(c): c for c in cands}
    name = settings.prompt_name if prompt_name is SETTINGS_PROMPT else prompt_name
    plan = make_plan(encoder, named, prompt_name=name, pipeline="fit", calibration={})
    with progress(settings, desc, len(texts), "text") as bar:
        vectors, stats = plan.run(encoder, list(texts), long_text=long_text or settings.long_text,
                                  progress=bar.update, empty="zeros", tap=tap)  # fmt: skip
    pooled = plan.pooled_only
    if pooled and (encoder.head.steps or encoder.head.refused):
        note = (
            f"{', '.join(pooled)}: pooled vectors, before the model's modules after pooling "
            "(their width does not fit them, or poolkit cannot apply them)."
        )
        if note not in settings.notes:
            settings.notes.append(note)
    if stats.num_truncated:
        settings.notes.append(
            f"{desc}: {stats.num_truncated} of {len(texts)} texts truncated at "
            f"{encoder.max_length} tokens."
        )
    return {c: vectors[name] for name, c in named.items()}, stats


def progress(settings: Any, desc: str, total: int, unit: str) -> Any:
    """A tqdm bar on stderr; hidden with ``settings.quiet`` or when stderr is not a terminal."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
        disable=True if settings.quiet else None, dynamic_ncols=True,
    )  # fmt: skip
