"""``poolkit.embed`` for a multi-vector recipe: its arguments checked, the run, the result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolkit._errors import arg_names, value_error
from poolkit.driver import warn_truncated

__all__ = [
    "check_width",
    "embed_multivector_recipe",
    "is_multivector",
    "resolve_multivector",
    "side_prompt",
]


def is_multivector(recipe: Any) -> bool:
    """Whether ``recipe`` (a Recipe, a name, or anything else) names the multi-vector level;
    a list holding one is refused (each call gives one ragged result)."""
    from poolkit.recipe import Recipe

    def one(r: Any) -> bool:
        if isinstance(r, Recipe):
            return r.level == "multivector"
        return isinstance(r, str) and r.strip().lower().startswith("multivector:")

    if isinstance(recipe, list | tuple) and any(one(r) for r in recipe):
        value_error("recipe", "one multi-vector recipe per call (a name, not a list)",
                    f"{len(recipe)} recipes", "Embed each multi-vector recipe in its own call.")  # fmt: skip
    return one(recipe)


def check_width(encoder: Any, recipe: Any) -> int:
    """Width of the recipe's token vectors on ``encoder`` (``dims``, MUVERA checked against
    the folder's width before any forward pass)."""
    from poolkit.multivector.encode import late_interaction
    from poolkit.recipe import check_dims

    width = late_interaction(encoder).width(int(encoder.info.hidden_size))
    if recipe.dims is not None:
        check_dims(recipe.dims, width, str(recipe))
        width = recipe.dims
    if recipe.muvera is not None:
        recipe.muvera.check_width(width)
    return width


def side_prompt(late: Any, prompt_name: str | None, prompt: str | None) -> str | None:
    """The prompt text of a side: ``prompt`` (``""``: none), else the folder's prompt named
    ``prompt_name``, else the side's own (``query``; ``document``, ``passage`` or
    ``corpus``), as sentence-transformers' ``encode_query``/``encode_document`` pick it."""
    from poolkit.prompts import SIDES, side_of

    if prompt is not None and prompt_name is not None:
        value_error("prompt", "None when `prompt_name` is given", f"{prompt!r:.40}", "Pass one.")
    if prompt is not None:
        return prompt or None
    if prompt_name in late.prompts:
        return late.prompts[prompt_name] or None
    if prompt_name is None or prompt_name in SIDES:
        return late.side_prompt(side_of(prompt_name))
    known = ", ".join(repr(k) for k in sorted({*SIDES, *late.prompts}))
    return value_error("prompt_name", f"one of {known}", repr(prompt_name),
                       "Pass `prompt='...'` for a prompt of your own.")  # fmt: skip


def resolve_multivector(
    recipe: Any,
    *,
    normalize: bool | None,
    dims: int | None,
    precision: str | None,
    refused: dict[str, bool],
) -> Any:
    """The multi-vector :class:`~poolkit.Recipe` of an ``embed`` call, with the ``normalize``,
    ``dims`` and ``precision`` keywords folded in; ``refused``: the arguments given that this
    level cannot honour, each named in one line. Checked before any model loads."""
    from poolkit.recipe import Recipe

    given = [name for name, on in refused.items() if on]
    if given:
        value_error(given[0], f"left unset with the multi-vector recipe {str(recipe)!r:.60}",
                    "a value", "Token vectors are the model's last layer, every token: drop "
                    f"{arg_names(given)}, and pool tokens with /poolF.")  # fmt: skip
    r = Recipe.parse(recipe)
    changes = {k: v for k, v in (("normalize", normalize), ("dims", dims),
                                 ("precision", precision)) if v is not None}  # fmt: skip
    for name, value in changes.items():
        mine = getattr(r, name)
        if mine is not None and mine != value:
            value_error(name, f"None or {mine!r}, as the recipe {str(r)!r} says", value,
                        "Drop one of the two.")  # fmt: skip
    return r.replace(**changes) if changes else r


def embed_multivector_recipe(
    texts: list[str],
    encoder: Any,
    recipe: Any,
    *,
    prompt_name: str | None,
    prompt: str | None,
    max_batch_tokens: int | None,
    return_stats: bool,
    progress: Callable[[int], None] | None,
) -> Any:
    """:func:`poolkit.embed` of a multi-vector ``recipe`` (from :func:`resolve_multivector`)
    over checked ``texts`` on ``encoder``; arguments as there. Runs the family's plan
    (:class:`~poolkit.multivector.plan.MultivectorPlan`)."""
    from poolkit.families import family_plan

    plan = family_plan(encoder, {str(recipe): recipe}, prompt_name=prompt_name, prompt=prompt)
    result, stats = plan.run(encoder, texts, max_batch_tokens=max_batch_tokens,
                             progress=progress)  # fmt: skip
    warn_truncated(stats, stacklevel=4)
    out = result[str(recipe)]
    return (out, stats) if return_stats else out
