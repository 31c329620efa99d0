"""The sparse level of the recipe grammar: ``splade``, ``splade_sum/top64``, ...

Its names say the level (no ``sparse:`` prefix needed); it takes one segment of its own,
``/topK``, and none of the dense ones (no layers, no normalisation, no ``_no_special``, no
output stage). Registered with :mod:`poolkit.levels` when this module loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolkit.levels import Level, RecipeError, one_of, register_level
from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = ["check_top_k"]


def check_top_k(level: str, top_k: Any) -> None:
    """Refuse a ``top_k`` that is not a positive int, or one off the sparse level."""
    if top_k is None:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise RecipeError(arg="top_k", expected="a positive number of weights to keep, e.g. /top64", got=repr(top_k))  # fmt: skip
    if level != "sparse":
        raise RecipeError(arg="top_k", expected="a sparse recipe (e.g. splade/top64)", got=f"/top{top_k} on a {level}-level recipe", fix="Drop it, or use /DIMS to truncate dense vectors.")  # fmt: skip


def _settle(fields: Mapping[str, Any]) -> Mapping[str, Any]:
    """Refuse, in one line, what does not apply to a sparse recipe: layers (SPLADE reads the
    last layer through the MLM head), normalisation, ``_no_special`` and the output stage."""
    check_top_k("sparse", fields["top_k"])
    if fields["layers"] is not None:
        raise RecipeError(arg="layers", expected="none on a sparse recipe", got=repr(fields["layers"]), fix="SPLADE reads the MLM head on the last layer: drop @LAYERS.")  # fmt: skip
    if fields["normalize"] is not None:
        raise RecipeError(arg="normalize", expected="None on a sparse recipe", got="/l2" if fields["normalize"] else "/raw", fix="Sparse weights are never L2-normalised: drop it.")  # fmt: skip
    if fields["exclude_special"]:
        raise RecipeError(arg="exclude_special", expected="False on a sparse recipe", got=True, fix="SPLADE pools every real token, as the model was trained.")  # fmt: skip
    for what in ("dims", "precision"):
        if fields[what] is not None:
            raise RecipeError(arg=what, expected="no dense output stage (/DIMS, /PRECISION) on a "
                                       "sparse recipe", got=f"/{fields[what]}", fix="Keep the largest weights with /topK instead, e.g. "
                                       "splade/top64.")  # fmt: skip
    return {}


def _segment(low: str) -> tuple[str, Any] | None:
    return ("top_k", int(low[3:])) if low.startswith("top") and low[3:].isdigit() else None


def _no_width(recipe: Any, hidden_size: int) -> int:
    raise RecipeError(arg="recipe", expected="a dense recipe (a sparse one is as wide as the vocabulary)", got=str(recipe))  # fmt: skip


register_level(
    Level(
        name="sparse",
        family="sparse",
        canonical=one_of(SPARSE_STRATEGIES),
        expected=f"one of {', '.join(SPARSE_STRATEGIES)}",
        names=tuple(SPARSE_STRATEGIES),
        bare=True,
        fields=("top_k",),
        settle=_settle,
        off_level=lambda field, level, value: check_top_k(level, value),
        segment=_segment,
        width=_no_width,
    )
)
