"""What a call asks for, as recipes: names, lists and values, validated once.

:func:`resolve_recipes` turns ``recipe=`` (a :class:`~poolkit.Recipe`, a name, a list of
them, or a mapping) into ``{column name: Recipe}``; the command line's shorthand flags and
the deprecated keywords (:mod:`poolkit._legacy`) pass their ``strategy``/``layers``/...
through it too. :func:`with_output_stage` adds ``dims``/``precision``; :func:`one_recipe`
is the one word- or span-level recipe of a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolkit._errors import arg_names, type_error, value_error
from poolkit.recipe import Recipe, check_output_stage, check_shorthands

__all__ = ["Layers", "one_recipe", "resolve_recipes", "with_output_stage"]

Layers = str | int | Sequence[int] | None


def resolve_recipes(
    strategy: Any = None,
    recipe: Any = None,
    *,
    level: str = "sequence",
    layers: Layers = None,
    layer_how: str = "mean",
    exclude_special: bool = False,
    normalize: bool | None = None,
) -> tuple[dict[str, Recipe] | None, bool]:
    """What to compute, validated once: ``({column name: Recipe}, as_dict)``.

    ``recipe`` (a :class:`Recipe`, a recipe name, or a list of them) or the shorthands
    ``strategy`` (a name or a list of names) + ``layers``/``layer_how``/``exclude_special``
    build the recipes; ``normalize`` fills a recipe's unset ``normalize``. ``None`` for
    the mapping means the model's intended pooling (known once the model loads).
    ``as_dict`` says whether a list was asked for (the result is then a dict).

    Raises:
        TypeError: ``strategy``/``recipe`` of the wrong type, or both given.
        ValueError: an unknown name (:class:`RecipeError`), an empty list, a repeated name.
    """
    if normalize is not None and not isinstance(normalize, bool):
        type_error("normalize", "True, False or None", repr(normalize))
    if recipe is not None:
        shorthands = {"strategy": strategy is not None, "layers": layers is not None,
                      "exclude_special": bool(exclude_special), "layer_how": layer_how != "mean"}  # fmt: skip
        clash = [k for k, given in shorthands.items() if given]
        if clash:
            type_error(
                "recipe",
                f"None when {arg_names(clash)} {'is' if len(clash) == 1 else 'are'} given",
                f"{recipe!r:.40}",
                "Pass one of the two: a recipe names the strategy, layers and special tokens "
                "itself, e.g. 'mean_no_special@last4'.",
            )
        if isinstance(recipe, Mapping):  # column name -> Recipe, already validated
            named = dict(recipe)
            if not named or not all(isinstance(r, Recipe) for r in named.values()):
                type_error("recipe", "a mapping of names to Recipe values", f"{recipe!r:.60}")
            if normalize is not None:
                named = {k: _with_normalize(r, normalize) for k, r in named.items()}
            return named, True
        items, arg = _as_list(recipe, "recipe", (str, Recipe))
        parsed = [Recipe.parse(x, level=level) for x in items]
        # Named as the recipe was asked for; a normalize= override does not rename it.
        named = {str(r): r if normalize is None else _with_normalize(r, normalize) for r in parsed}
    elif strategy is None:
        # The model's pooling, once known; still validate the shorthands now.
        check_shorthands(layers, layer_how, exclude_special, normalize)
        return None, False
    else:
        items, arg = _as_list(strategy, "strategy", (str,))
        named = {
            x: Recipe(x, level=level, layers=layers, layer_how=layer_how,
                      exclude_special=exclude_special, normalize=normalize)
            for x in items
        }  # fmt: skip
    if len(named) != len(items):
        value_error(arg, "a list of distinct names", items, "List each name once.")
    return named, not isinstance(recipe if recipe is not None else strategy, str | Recipe)


_DEFAULT = {"sequence": "mean", "word": "first", "span": "endpoints"}


def _with_normalize(recipe: Recipe, normalize: bool) -> Recipe:
    if recipe.normalize is not None and recipe.normalize != normalize:
        value_error(
            "normalize",
            f"None or {recipe.normalize}, as the recipe {str(recipe)!r} says",
            normalize,
            "Drop one of the two.",
        )
    return recipe.replace(normalize=normalize)


def _as_list(value: Any, arg: str, kinds: tuple[type, ...]) -> tuple[list[Any], str]:
    if isinstance(value, kinds):
        return [value], arg
    if not isinstance(value, Sequence) or isinstance(value, bytes):
        type_error(arg, "a name or a list of names", f"{type(value).__name__} ({value!r:.40})")
    items = list(value)
    if not items or not all(isinstance(x, kinds) for x in items):
        value_error(arg, "a name or a non-empty list of names", repr(value))
    return items, arg


def with_output_stage(
    recipes: Mapping[str, Recipe], dims: int | None, precision: str | None
) -> dict[str, Recipe]:
    """``recipes`` with the output stage of the ``dims``/``precision`` keywords (or flags)
    added; a recipe naming another stage is refused. A key that was the recipe's name
    becomes the new name."""
    if dims is None and precision is None:
        return dict(recipes)
    dims, precision = check_output_stage("sequence", dims, precision)  # once, for all
    out: dict[str, Recipe] = {}
    for name, r in recipes.items():
        for arg, mine, asked in (("dims", r.dims, dims),
                                 ("precision", r.precision, precision)):  # fmt: skip
            if mine is not None and asked is not None and mine != asked:
                value_error(arg, f"None or {mine!r}, as the recipe {str(r)!r} says", asked,
                            "Drop one of the two.")  # fmt: skip
        new = r.replace(dims=r.dims if dims is None else dims,
                        precision=r.precision or precision)  # fmt: skip
        out[str(new) if name == str(r) else name] = new
    return out


def one_recipe(
    level: str, strategy: str | None, recipe: Any, layers: Layers, layer_how: str
) -> Recipe:
    """The one word/span recipe asked for by ``recipe`` or the shorthands (validated once)."""
    if recipe is None:
        return Recipe(strategy or _DEFAULT[level], level=level, layers=layers, layer_how=layer_how)
    if strategy is not None or layers is not None or layer_how != "mean":
        type_error(
            "recipe",
            "None when `strategy`, `layers` or `layer_how` is given",
            f"{recipe!r:.40}",
            "Pass one of the two: a recipe names its strategy and layers itself.",
        )
    if not isinstance(recipe, str | Recipe):
        type_error("recipe", "a Recipe or a name", f"{recipe!r:.40}")
    r = Recipe.parse(recipe, level=level)
    if r.level != level:
        value_error("recipe", f"a {level}-level recipe", f"{str(r)!r} ({r.level} level)")
    return r
