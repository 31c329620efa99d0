"""The families of outputs, and the one way a request runs in each: a registry.

A family (dense vectors, learned sparse vectors, multi-vector token sets) turns a request
(an encoder, recipes of that family, the prompt, the pipeline, the int8/uint8 ranges) into
a :class:`FamilyPlan`: everything the run needs, checked before any forward pass, and a
``run`` that takes texts to outputs. Callers ask :func:`family_plan` for the plan of their
recipes and run it; they never name a family. The built-in families register from their
own modules, loaded on first use; a family of another package registers its recipe
levels (:mod:`poolkit.levels`) and its planner when its entry point (group
``poolkit.families``) loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from poolkit._errors import value_error
from poolkit.errors import InputError
from poolkit.levels import load_families

__all__ = [
    "FamilyPlan",
    "FloatOutputs",
    "family_of",
    "family_plan",
    "float_only",
    "is_builtin",
    "register_family",
]

# The built-in families: name -> the module whose import registers it.
_BUILTIN = {
    "dense": "poolkit.plan",
    "sparse": "poolkit.sparse.plan",
    "multivector": "poolkit.multivector.plan",
}


class FamilyPlan(Protocol):
    """A request resolved for one encoder in one family.

    Attributes:
        family: the family's name (:attr:`poolkit.Recipe.family`).
        recipes: name -> :class:`~poolkit.Recipe`, each of the family.
        prompt: the prompt text put before every text (``None``: none).
    """

    family: str
    recipes: Mapping[str, Any]
    prompt: str | None

    def with_ranges(self, ranges: Mapping[str, Any] | None) -> FamilyPlan:
        """This plan with the int8/uint8 ``ranges`` (by name) checked and set."""
        ...

    def columns(
        self, vectors: Mapping[str, Any], widths: Mapping[str, int]
    ) -> list[tuple[str, Any]]:
        """One batch's outputs (from :meth:`run`) as the Parquet columns ``poolkit embed``
        writes, ``(column name, pyarrow array)``; ``widths``: each output's width."""
        ...

    def record(self, widths: Mapping[str, int]) -> dict[str, Any] | None:
        """What the columns are, for a Parquet file's ``poolkit`` metadata (None: nothing
        beyond what the job records)."""
        ...

    def run(
        self,
        encoder: Any,
        texts: Sequence[str],
        *,
        long_text: str = "truncate",
        max_batch_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[dict[str, Any], Any]:
        """``({name: outputs}, stats)`` of checked ``texts``, in input order; ``stats`` an
        :class:`~poolkit.EmbedStats` whose ``dims`` give each output's width."""
        ...


# planner(encoder, recipes, *, prompt_name, prompt, pipeline, calibration) -> FamilyPlan
Planner = Callable[..., FamilyPlan]

_planners: dict[str, Planner] = {}


def register_family(name: str, planner: Planner) -> None:
    """Make ``planner`` the way recipes of the family ``name`` run.

    ``planner(encoder, recipes, *, prompt_name, prompt, pipeline, calibration)`` returns a
    :class:`FamilyPlan`; it checks the request against the model (raising what a bad
    request raises) before any forward pass."""
    _planners[name] = planner


def float_only(family: str, ranges: Mapping[str, Any] | None) -> None:
    """Refuse int8/uint8 ``ranges`` (by recipe name) for a ``family`` that stores float
    outputs only, naming them."""
    if ranges:
        value_error("calibration", f"no int8/uint8 ranges for {family} recipes",
                    ", ".join(ranges), "Drop them: these outputs are stored as floats.")  # fmt: skip


class FloatOutputs:
    """``with_ranges`` of a plan whose family stores its outputs as floats: no int8/uint8
    ranges, refused in one line naming them (:func:`float_only`)."""

    family: ClassVar[str]

    def with_ranges(self, ranges: Mapping[str, Any] | None) -> Any:
        """This plan, unchanged; ``ranges`` must be empty."""
        float_only(self.family, ranges)
        return self


def is_builtin(family: str) -> bool:
    """Whether ``family`` is one of poolkit's own (its other callers run it through paths of
    their own; another package's family runs only through its plan)."""
    return family in _BUILTIN


def family_of(recipes: Mapping[str, Any]) -> str:
    """The one family (:attr:`poolkit.Recipe.family`) of ``recipes``; ``"dense"`` for none.
    Recipes of two families are refused: each family has its own path and output."""
    families = {r.family for r in recipes.values()}
    if len(families) > 1:
        value_error("recipe", "recipes of one family per call", ", ".join(map(str, recipes)),
                    "Embed each family's recipes in a call of their own.")  # fmt: skip
    return families.pop() if families else "dense"


def _planner(name: str) -> Planner:
    if name not in _planners and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])  # registers itself
    if name not in _planners:
        load_families()
    if name not in _planners:
        raise InputError(expected=f"a registered family for {name!r} recipes",
                         got=f"none (registered: {', '.join(sorted({*_BUILTIN, *_planners}))})",
                         fix="Register its planner with poolkit.families.register_family.")  # fmt: skip
    return _planners[name]


def family_plan(
    encoder: Any,
    recipes: Mapping[str, Any],
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    pipeline: str = "full",
    calibration: Mapping[str, Any] | None = None,
    fits: Mapping[str, Any] | None = None,
) -> FamilyPlan:
    """The plan of ``recipes`` (one family, :func:`family_of`) on ``encoder``: the request
    resolved once, before any forward pass (``calibration``: the int8/uint8 ranges by name,
    ``None`` when not yet known; ``fits``: the fit of each recipe with a fitted transform,
    :mod:`poolkit.fitted`, by name or by the recipe a fit is made for)."""
    planner = _planner(family_of(recipes))
    fitted = any(getattr(r, "transform", None) for r in recipes.values())
    if fits and not fitted:
        value_error("fit", "None for recipes without a fitted transform (/pcaK, /whiten, "
                    "/abttD)", ", ".join(map(str, fits)), "Drop the fit, or ask for a "
                    "fitted recipe such as mean/pca128.")  # fmt: skip
    extra = {"fits": fits or {}} if fitted else {}  # only recipes with a transform take it
    return planner(encoder, recipes, prompt_name=prompt_name, prompt=prompt, pipeline=pipeline,
                   calibration=calibration, **extra)  # fmt: skip
