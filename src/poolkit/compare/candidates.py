"""What `poolkit compare` compares: :class:`poolkit.Recipe` candidates, one per table row,
named ``str(recipe)`` as ``poolkit embed --recipe`` takes it; layer variants are layer
specs (:func:`poolkit.layers.layer_spec`).
"""

from __future__ import annotations

from collections.abc import Sequence

from poolkit.layers import layer_spec
from poolkit.recipe import NO_SPECIAL, Recipe, RecipeError
from poolkit.sequence import SEQUENCE_STRATEGIES

__all__ = ["candidates", "default_strategies"]

_SEQUENCE_EXTRA = ("mean" + NO_SPECIAL, "cls+mean", "mean+max")
_WORD_DEFAULT = ("first", "last", "mean", "max", "endpoints")
_SPAN_DEFAULT = ("endpoints", "mean", "max", "diff_sum", "attention", "x,y,x*y")


def default_strategies(level: str) -> tuple[str, ...]:
    """Every strategy compared by default at ``level`` ("sequence", "word" or "span")."""
    if level == "sequence":
        return (*SEQUENCE_STRATEGIES, *_SEQUENCE_EXTRA)
    return _WORD_DEFAULT if level == "word" else _SPAN_DEFAULT


def candidates(
    level: str, strategies: Sequence[str | Recipe] | None, layers: Sequence[object] | None
) -> list[Recipe]:
    """All recipes in a stable order: strategies outer, layer selections inner.

    ``strategies`` None means :func:`default_strategies`; each may be any recipe name of
    ``level`` or a :class:`Recipe` (used as it is: nothing is parsed twice); one that
    carries its own layers is kept as it is. ``layers``: layer specs (``"last4"``,
    ``"-1,-2"``, ...); None means the last layer only. Duplicates are dropped. Raises a
    ValueError (:class:`poolkit.RecipeError` for a name) for an unknown name or layer spec.
    """
    chosen = tuple(strategies) if strategies else default_strategies(level)
    chosen_layers = [layer_spec(x) for x in layers] if layers else [None]
    parsed = [s if isinstance(s, Recipe) else Recipe.parse(s, level=level) for s in chosen]
    for s, r in zip(chosen, parsed, strict=True):
        if r.level != level and not (level == "sequence" and r.level == "multivector"):
            raise RecipeError(
                arg="strategies",
                expected=f"{level}-level recipes",
                got=f"{str(s)!r} ({r.level} level)",
            )
    out: list[Recipe] = []
    for r in parsed:
        variants = [
            r if r.layers is not None or lay is None else r.replace(layers=lay)
            for lay in ([None] if r.layers is not None else chosen_layers)
        ]
        for c in variants:
            if c not in out:
                out.append(c)
    return out
