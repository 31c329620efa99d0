"""What `poolkit compare` compares: named (strategy, layers) candidates and how each is
derived from one batch's hidden states through poolkit's core functions.

Sequence strategies are the names of :data:`poolkit.SEQUENCE_STRATEGIES`, ``NAME_no_special``
(the same strategy with special tokens excluded) and ``+``-joined concatenations of those.
Word strategies are :data:`poolkit.WORD_STRATEGIES`; span strategies are those accepted by
:func:`poolkit.span_embeddings`. Layer variants are ``layer_mix`` selections averaged
(``how="mean"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit.embed import to_float32_numpy
from poolkit.sequence import SEQUENCE_STRATEGIES, parse_sequence_strategy

__all__ = [
    "DEFAULT_LAYERS",
    "LAYER_VARIANTS",
    "NO_SPECIAL",
    "Candidate",
    "candidates",
    "default_strategies",
    "layer_views",
    "sequence_vectors",
]

NO_SPECIAL = "_no_special"
LAYER_VARIANTS = ("last", "last4", "first_last")
DEFAULT_LAYERS = ("last",)
_SEQUENCE_EXTRA = ("mean" + NO_SPECIAL, "cls+mean", "mean+max")
_WORD_DEFAULT = ("first", "last", "mean", "max", "first_last")
_SPAN_DEFAULT = ("endpoints", "mean", "max", "diff_sum", "attention", "x,y,x*y")


@dataclass(frozen=True)
class Candidate:
    """One representation to score: a strategy string at one layer selection."""

    strategy: str
    layers: str = "last"


def default_strategies(level: str) -> tuple[str, ...]:
    """Every strategy compared by default at ``level`` ("sequence", "word" or "span")."""
    if level == "sequence":
        return (*SEQUENCE_STRATEGIES, *_SEQUENCE_EXTRA)
    return _WORD_DEFAULT if level == "word" else _SPAN_DEFAULT


def sequence_parts(strategy: str) -> tuple[tuple[str, bool], ...]:
    """``"cls+mean_no_special"`` -> ``(("cls", False), ("mean", True))``: (name, exclude_special).

    Raises ValueError (naming ``--strategies`` and the valid names) for an unknown name.
    """
    parts = []
    for piece in strategy.split("+"):
        name = piece.strip().lower()
        drop = name.endswith(NO_SPECIAL)
        base = name[: -len(NO_SPECIAL)] if drop else name
        if base not in SEQUENCE_STRATEGIES:
            raise ValueError(
                f"Expected `--strategies` to name sequence strategies from "
                f"{', '.join(SEQUENCE_STRATEGIES)} (optionally with the suffix {NO_SPECIAL!r}, "
                f"joined with '+'), but got {strategy!r}."
            )
        parse_sequence_strategy(base)  # the core's own validation stays the source of truth
        parts.append((base, drop))
    return tuple(parts)


def candidates(
    level: str, strategies: Sequence[str] | None, layers: Sequence[str] | None
) -> list[Candidate]:
    """All (strategy, layers) pairs in a stable order: strategies outer, layers inner.

    ``strategies`` None means :func:`default_strategies`; ``layers`` None means ``("last",)``.
    Duplicates are dropped. Raises ValueError naming the option for unknown names.
    """
    chosen = tuple(strategies) if strategies else default_strategies(level)
    chosen_layers = tuple(layers) if layers else DEFAULT_LAYERS
    for name in chosen_layers:
        if name not in LAYER_VARIANTS:
            raise ValueError(
                f"Expected `--layers` to be among {', '.join(LAYER_VARIANTS)}, but got {name!r}."
            )
    for s in chosen:
        _check_strategy(level, s)
    out: list[Candidate] = []
    for s in chosen:
        for layer in chosen_layers:
            c = Candidate(s, layer)
            if c not in out:
                out.append(c)
    return out


def _check_strategy(level: str, strategy: str) -> None:
    if level == "sequence":
        sequence_parts(strategy)
        return
    if level == "word":
        from poolkit.words import WORD_STRATEGIES

        if strategy not in WORD_STRATEGIES:
            raise ValueError(
                f"Expected `--strategies` to name word strategies from "
                f"{', '.join(WORD_STRATEGIES)}, but got {strategy!r}."
            )
        return
    from poolkit.spans import parse_span_strategy

    try:
        parse_span_strategy(strategy)
    except ValueError as e:
        raise ValueError(f"`--strategies`: {strategy!r} is not a span strategy. {e}") from None


def layer_views(hidden_states: Any, last: Any, layers: Sequence[str]) -> dict[str, Any]:
    """The ``(B, L, H)`` hidden states for each layer selection in ``layers``.

    ``hidden_states`` is the encoder's tuple of all layers (index 0 = embeddings output) or
    None when only ``last`` (the final layer, ``(B, L, H)``) was computed.
    """
    from poolkit import layer_mix

    views: dict[str, Any] = {}
    for name in layers:
        views[name] = last if name == "last" else layer_mix(hidden_states, name, how="mean")
    return views


def sequence_vectors(
    hidden: Any,
    mask: Any,
    special_tokens_mask: Any,
    strategies: Sequence[str],
) -> dict[str, np.ndarray]:
    """Every sequence strategy in ``strategies`` for one batch, as float32 ``(B, D)`` NumPy.

    ``hidden`` ``(B, L, H)``, ``mask`` and ``special_tokens_mask`` ``(B, L)`` (1 = real /
    special). Each distinct base strategy is pooled once by :func:`poolkit.sequence_embedding`
    (one call per exclude_special setting); concatenations are joined from those pieces.
    Rows left with no token after dropping special tokens give zeros there.
    """
    from poolkit import sequence_embedding

    wanted: dict[bool, list[str]] = {False: [], True: []}
    for s in strategies:
        for name, drop in sequence_parts(s):
            if name not in wanted[drop]:
                wanted[drop].append(name)
    width = hidden.shape[-1]
    pieces: dict[tuple[str, bool], np.ndarray] = {}
    for drop, names in wanted.items():
        if not names:
            continue
        pooled = sequence_embedding(
            hidden,
            mask,
            names,
            special_tokens_mask=special_tokens_mask if drop else None,
            exclude_special=drop,
            empty="zeros" if drop else "raise",
        )
        pooled = to_float32_numpy(pooled)
        for k, name in enumerate(names):
            pieces[(name, drop)] = pooled[:, k * width : (k + 1) * width]
    return {
        s: np.concatenate([pieces[p] for p in sequence_parts(s)], axis=-1)
        if "+" in s
        else np.ascontiguousarray(pieces[sequence_parts(s)[0]])
        for s in strategies
    }
