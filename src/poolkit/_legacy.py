"""The keywords that spelled a recipe before ``recipe=`` did: one adapter, one warning.

``strategy``, ``normalize``, ``layers``, ``layer_how``, ``exclude_special``, ``dims`` and
``precision`` still work on every ``embed*`` function. :func:`legacy_recipe` folds them
into the recipe they spell, exactly as the functions did before, and warns with a
``DeprecationWarning`` that names the ``recipe=`` to write instead. Nothing else in
poolkit reads them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from poolkit._errors import arg_names, type_error

__all__ = ["LEGACY_KEYWORDS", "legacy_recipe", "split_options"]

#: The shorthands each level took, in the order the old signatures listed them.
LEGACY_KEYWORDS = {
    "sequence": ("strategy", "normalize", "layers", "layer_how", "exclude_special", "dims",
                 "precision"),
    "word": ("strategy", "layers", "layer_how"),
    "span": ("strategy", "layers", "layer_how"),
}  # fmt: skip


def split_options(
    func: str, options: Mapping[str, Any], run: Mapping[str, Any], level: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` (a call's ``**options``) split into the run options, defaults from
    ``run`` filled in, and the legacy keywords given. Any other keyword is refused as
    Python refuses one, with the closest known name."""
    legacy_names = LEGACY_KEYWORDS[level]
    unknown = [k for k in options if k not in run and k not in legacy_names]
    if unknown:
        from difflib import get_close_matches

        known = [*run, *legacy_names, "recipe"]
        near = get_close_matches(unknown[0], known, n=1)
        type_error(f"{func}()'s keywords", f"among {arg_names(sorted(run))} (or recipe=)",
                   f"an unexpected keyword `{unknown[0]}`",
                   f"Did you mean `{near[0]}`?" if near else "")  # fmt: skip
    legacy = {k: v for k, v in options.items() if k in legacy_names}
    return {k: options.get(k, default) for k, default in run.items()}, legacy


def legacy_recipe(
    func: str,
    level: str,
    recipe: Any,
    legacy: Mapping[str, Any],
    load: Callable[[], Any] | None = None,
    stacklevel: int = 4,
    refused: Mapping[str, bool] | None = None,
) -> Any:
    """``recipe`` with the ``legacy`` keywords folded in, or ``recipe`` itself when none is
    given. ``load()`` gives the encoder, needed only when the keywords adjust the model's
    own pooling (no ``strategy`` nor ``recipe``); ``refused``: the caller's other arguments a
    multi-vector recipe cannot take, named in the same refusal. Warns once per call, naming
    the recipe; ``stacklevel`` points the warning at the user's line (4: ``embed*`` ->
    ``run_options``).

    Returns what ``recipe=`` takes: one :class:`~poolkit.Recipe`, or for a list a mapping
    ``{name: Recipe}`` keyed as the old call keyed its result."""
    old_defaults = {"layer_how": "mean", "exclude_special": False}  # given: differs from these
    given = {k: v for k, v in legacy.items() if v is not None and v != old_defaults.get(k)}
    if not given:
        return recipe
    asked = list(given)  # the keywords the caller wrote, for the warning
    from poolkit.asked import one_recipe, resolve_recipes, with_output_stage
    from poolkit.multivector.api import is_multivector, resolve_multivector

    names = [recipe] if isinstance(recipe, str) else recipe  # names, not Recipe values
    if (
        "strategy" not in given
        and isinstance(names, list | tuple)
        and names
        and all(isinstance(x, str) for x in names)
        and not is_multivector(recipe)
        and {"layers", "layer_how", "exclude_special"} & set(given)
    ):
        # The third positional argument was `strategy`: plain names with the shorthands
        # meant strategies, as they did.
        given, recipe = {"strategy": recipe, **given}, None

    if level != "sequence":
        out: Any = one_recipe(level, given.get("strategy"), recipe, given.get("layers"),
                               given.get("layer_how", "mean"))  # fmt: skip
        spelled: Any = str(out)
    elif is_multivector(recipe):
        own = {k: k in given for k in ("strategy", "layers", "layer_how", "exclude_special")}
        out = resolve_multivector(recipe, normalize=given.get("normalize"),
                                  dims=given.get("dims"), precision=given.get("precision"),
                                  refused={**own, **(refused or {})})  # fmt: skip
        spelled = str(out)
    else:
        named, as_dict = resolve_recipes(
            given.get("strategy"), recipe, layers=given.get("layers"),
            layer_how=given.get("layer_how", "mean"),
            exclude_special=given.get("exclude_special", False), normalize=given.get("normalize"),
        )  # fmt: skip
        if named is None:  # the model's own pooling, adjusted
            assert load is not None, "a caller without a model always names a strategy"
            from poolkit.recipe import check_output_stage

            check_output_stage("sequence", given.get("dims"), given.get("precision"))  # first
            info = load().info
            named = {info.pooling: info.intended_recipe(
                layers=given.get("layers"), layer_how=given.get("layer_how", "mean"),
                exclude_special=given.get("exclude_special", False),
                normalize=given.get("normalize"))}  # fmt: skip
        named = with_output_stage(named, given.get("dims"), given.get("precision"))
        spelled = [str(r) for r in named.values()] if as_dict else str(next(iter(named.values())))
        out = named if as_dict else next(iter(named.values()))
    warnings.warn(
        f"{func}(): {arg_names(asked)} {'is' if len(asked) == 1 else 'are'} deprecated; pass "
        f"recipe={spelled!r} instead (the same vectors).",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return out
