"""The multi-vector family's plan: one multi-vector recipe resolved once for an encoder
(the side, its prompt, the token width checked), run by
:func:`~poolkit.multivector.encode.embed_multivector`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from poolkit._errors import value_error
from poolkit.families import FloatOutputs, float_only, register_family
from poolkit.io.writers import dense_column, ragged_column
from poolkit.multivector.api import check_width, side_prompt
from poolkit.multivector.encode import embed_multivector, late_interaction
from poolkit.output import stage_record
from poolkit.prompts import side_of

__all__ = ["MultivectorPlan", "plan_multivector"]


@dataclass(frozen=True)
class MultivectorPlan(FloatOutputs):
    """A multi-vector recipe resolved for one encoder (see :func:`plan_multivector`).

    Attributes:
        recipes: ``{name: Recipe}``, one multi-vector recipe.
        prompt: the side's prompt text (``None``: none).
        side: ``"query"`` or ``"document"`` (lengths, expansion, skiplist follow it).
        width: each output vector's width (MUVERA: its one vector's).
    """

    family: ClassVar[str] = "multivector"
    recipes: Mapping[str, Any]
    prompt: str | None
    side: str
    width: int

    def columns(
        self, vectors: Mapping[str, Any], widths: Mapping[str, int]
    ) -> list[tuple[str, Any]]:
        """The output as one Parquet column: ``large_list<fixed_size_list<float32>[D]>``, one
        ``(tokens, D)`` array a row; MUVERA ``fixed_size_list<float32>[D]``."""
        ((name, value),) = vectors.items()
        if isinstance(value, list):
            return [(name, ragged_column(value, self.width))]
        return [(name, dense_column(value))]

    def record(self, widths: Mapping[str, int]) -> dict[str, Any] | None:
        """With an output stage (``/DIMS``, float16), what the column is
        (:func:`poolkit.output.stage_record`); else None."""
        return stage_record(self.recipes, widths, {})

    def run(
        self,
        encoder: Any,
        texts: Sequence[str],
        *,
        long_text: str = "truncate",
        max_batch_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[dict[str, Any], Any]:
        """``({name: vectors}, stats)`` of checked ``texts``: a list of ``(tokens, D)``
        float32 arrays, one a text; MUVERA an ``(N, D)`` array."""
        ((name, recipe),) = self.recipes.items()
        out, _, stats = embed_multivector(texts, encoder, recipe, side=self.side,
                                          prompt=self.prompt, max_batch_tokens=max_batch_tokens,
                                          progress=progress)  # fmt: skip
        stats.dims = {name: self.width}
        if recipe.muvera is not None:  # one dense vector a text
            return {name: np.stack(out) if out else np.zeros((0, self.width), np.float32)}, stats
        return {name: out}, stats


def plan_multivector(
    encoder: Any,
    recipes: Mapping[str, Any],
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    pipeline: str = "full",
    calibration: Mapping[str, Any] | None = None,
) -> MultivectorPlan:
    """Resolve one multi-vector recipe on ``encoder``: the side (``prompt_name`` ``"query"``
    or ``"document"``) and its prompt, the width (``/dims``, MUVERA checked against the
    folder's). Token vectors always take the folder's projection, so ``pipeline`` must be
    ``"full"``; int8/uint8 ``calibration`` is refused."""
    if len(recipes) != 1:
        value_error("recipe", "one multi-vector recipe per run",
                    ", ".join(map(str, recipes.values())), "Run one each.")  # fmt: skip
    (recipe,) = recipes.values()
    if pipeline != "full":
        value_error("pipeline", f"'full' with the multi-vector recipe {str(recipe)!r:.60}",
                    repr(pipeline), "Token vectors always take the folder's projection: drop "
                    "it.")  # fmt: skip
    float_only("multivector", calibration)
    width = check_width(encoder, recipe)
    if recipe.muvera is not None:
        width = recipe.muvera.output_dim()
    text = side_prompt(late_interaction(encoder), prompt_name, prompt)
    return MultivectorPlan(recipes, text, side_of(prompt_name), width)


register_family("multivector", plan_multivector)
