"""The levels of the recipe grammar, each with the family that computes it: a registry.

A recipe's level (``sequence``, ``word``, ``span``, ``sparse``, ``multivector``) says what one
text becomes. :class:`~poolkit.Recipe` asks this registry for every rule that depends on the
level, and names none: the level's strategy names, the trailing ``/SEGMENT``s it adds, the
fields it takes beyond the common ones, whether it takes the output stage, its family and
what kind of output it gives. :mod:`poolkit.recipe` registers the pooling levels of the dense
family; every other level is registered by its family's module, imported on first use.

A family of another package declares an entry point in the group ``poolkit.families``
(``NAME = "package.module"`` or ``"package.module:register"``): poolkit loads each once, the
first time it looks for a level or a family it does not know, and calls it when it names a
function. Loading it registers its levels (:func:`register_level`) and its planner
(:func:`poolkit.families.register_family`).
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

from poolkit.errors import InputError

__all__ = [
    "GROUP",
    "Level",
    "RecipeError",
    "bare_level",
    "level",
    "level_names",
    "levels",
    "load_families",
    "one_of",
    "register_level",
]

GROUP = "poolkit.families"  # the entry-point group of other packages' families

# The built-in levels of the other families: name -> the module whose import registers it.
_BUILTIN = {"sparse": "poolkit.sparse.level", "multivector": "poolkit.multivector.segments"}


class RecipeError(InputError):
    """A recipe that does not name a valid pooling (one line: the valid forms, the closest)."""


@dataclasses.dataclass(frozen=True)
class Level:
    """One level's part of the recipe grammar.

    Attributes:
        name: the ``LEVEL:`` prefix of its names.
        family: the family that computes it (:mod:`poolkit.families`).
        canonical: ``canonical(strategy, exclude_special) -> str | None``: the lower-cased,
            stripped strategy text spelled canonically (``exclude_special``: the recipe
            drops special tokens); ``None`` when it is not one of the level's.
        expected: what a strategy of the level is, for the error that refuses another.
        names: its strategy names (hints; with ``bare``, the names that say the level).
        bare: its names need no ``LEVEL:`` prefix (they name no strategy of another level).
        fields: the :class:`~poolkit.Recipe` fields only it takes (``top_k``), each
            ``None`` on every other level.
        settle: ``settle(fields) -> changes``: the recipe's fields (a dict) checked for this
            level, and those it settles (e.g. a pool factor of 1 is none); raises an
            :class:`~poolkit.errors.InputError` naming the field.
        off_level: ``off_level(field, level, value)``: refuse one of its ``fields`` set on a
            recipe of another ``level`` (one line saying where it belongs).
        segment: ``segment(text) -> (field, value) | None``: a lower-cased trailing
            ``/SEGMENT`` of its own, else ``None``.
        output_stage: whether it takes ``/DIMS`` and ``/PRECISION``.
        fitted: whether it takes a fitted ``/TRANSFORM`` (:mod:`poolkit.fitted`).
        model_normalize: whether ``normalize=None`` follows the model's normalisation.
        kind: ``kind(recipe) -> str``: what one text becomes (``None``: its family's name).
        width: ``width(recipe, hidden_size) -> int``: the width of one pooled vector before
            any module and the output stage (``None``: no fixed width; refused).
    """

    name: str
    family: str
    canonical: Callable[[str, bool], str | None]
    expected: str
    names: tuple[str, ...] = ()
    bare: bool = False
    fields: tuple[str, ...] = ()
    settle: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    off_level: Callable[[str, str, Any], None] | None = None
    segment: Callable[[str], tuple[str, Any] | None] | None = None
    output_stage: bool = False
    fitted: bool = False
    model_normalize: bool = False
    kind: Callable[[Any], str] | None = None
    width: Callable[[Any, int], int] | None = None

    def refuse_off_level(self, field: str, level: str, value: Any) -> None:
        """Refuse one of :attr:`fields`, ``value``, on a recipe of another ``level``."""
        if self.off_level is not None:
            self.off_level(field, level, value)
        raise RecipeError(arg=field, expected=f"None at the {level} level", got=repr(value),
                          fix=f"It belongs to {self.name}-level recipes: drop it.")  # fmt: skip

    def kind_of(self, recipe: Any) -> str:
        """What one text of ``recipe`` becomes (:attr:`poolkit.Recipe.kind`)."""
        return self.kind(recipe) if self.kind is not None else self.family


def one_of(names: Any) -> Callable[[str, bool], str | None]:
    """A :attr:`Level.canonical` for a level whose strategies are ``names``, as spelled."""
    known = frozenset(names)
    return lambda text, exclude_special: text if text in known else None


_levels: dict[str, Level] = {}
_plugins_loaded = False
_lock = threading.RLock()  # a plugin loading may ask for levels again


def load_families() -> None:
    """Load the families other packages declare (entry-point group :data:`GROUP`), once; a
    plugin that fails to load is refused in one line naming its package."""
    global _plugins_loaded
    if _plugins_loaded:  # the common case, without the lock
        return
    with _lock:
        if _plugins_loaded:
            return
        _plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=GROUP):
            dist = getattr(ep, "dist", None)
            package = f"{dist.name} {dist.version}" if dist is not None else "(unknown package)"
            try:
                loaded = ep.load()
                if callable(loaded):
                    loaded()
            except InputError:
                raise
            except Exception as e:  # the plugin's own code
                raise InputError(expected=f"the family plugin {package} ({ep.name} = {ep.value}) "
                                 "to load", got=f"it raised {type(e).__name__}: {e}",
                                 fix="Reinstall or fix the plugin.") from None  # fmt: skip


def register_level(spec: Level) -> None:
    """Make ``spec`` the rules of the level ``spec.name``; a bare name that another level
    already takes is refused."""
    for other in _levels.values():
        clash = set(spec.names) & set(other.names) if spec.bare or other.bare else set()
        if other.name != spec.name and clash:
            raise InputError(arg="level", expected="strategy names no other level takes",
                             got=f"{spec.name}: {', '.join(sorted(clash))} (also {other.name})",
                             fix="Rename them, or drop bare=True and use the LEVEL: prefix.")  # fmt: skip
    _levels[spec.name] = spec


def levels(*, plugins: bool = False) -> dict[str, Level]:
    """Every registered level, by name, the built-in ones loaded; ``plugins``: the families
    of other packages loaded first (:func:`load_families`: where a name is not known, not
    on every parse)."""
    if plugins:
        load_families()
    for name, module in _BUILTIN.items():
        if name not in _levels:
            importlib.import_module(module)  # registers itself
    return _levels


def level(name: str) -> Level | None:
    """The level called ``name``; ``None`` when none is registered."""
    if name not in _levels and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _levels:
        load_families()
    return _levels.get(name)


def level_names() -> tuple[str, ...]:
    """The registered levels' names (other packages' too), in the order they registered."""
    return tuple(levels(plugins=True))


def bare_level(strategy: str, *, plugins: bool = False) -> Level | None:
    """The level whose bare names include ``strategy`` (lower-cased, stripped), if any;
    ``plugins``: the levels of other packages' families too (:func:`levels`)."""
    found = levels(plugins=plugins).values()
    return next((s for s in found if s.bare and strategy in s.names), None)
