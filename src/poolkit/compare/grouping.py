"""Rows of `poolkit compare` that cannot differ, merged into one.

Under cosine similarity (``sts``, ``retrieval``) a per-text rescaling of a vector changes
nothing: ``sum``, ``mean`` and ``mean_sqrt_len`` pool the same tokens and differ only by a
positive factor per text (1, 1/n, 1/sqrt(n)), so their similarities, rankings and scores
are equal. The same holds for their ``_no_special`` forms, at each layer selection
(recipes that differ only in the strategy). Probes (standardised features) and k-means
see the scale, so other tasks keep every row.
"""

from __future__ import annotations

from collections.abc import Sequence

from poolkit.recipe import NO_SPECIAL, Recipe

__all__ = ["COSINE_TASKS", "SCALE_FAMILY", "groups"]

SCALE_FAMILY = ("mean", "sum", "mean_sqrt_len")
COSINE_TASKS = ("sts", "retrieval")


def _key(c: Recipe, task: str) -> object:
    if task not in COSINE_TASKS or "+" in c.strategy:
        return c
    name = c.strategy.strip().lower()
    drop = name.endswith(NO_SPECIAL)
    base = name[: -len(NO_SPECIAL)] if drop else name
    if base not in SCALE_FAMILY:
        return c
    # Everything but the strategy (layers, how they mix, normalisation) must match too.
    return ("scale", drop, c.level, c.layers, c.layer_how, c.normalize, c.dims, c.precision)


def groups(
    cands: Sequence[Recipe], task: str, intended: Recipe | None = None
) -> list[tuple[Recipe, ...]]:
    """``cands`` partitioned into rows that cannot differ under ``task``'s scoring.

    Groups keep candidate order (by first member); inside a group ``intended`` comes first
    when it is a member, then candidate order. The first member is the row's name.
    """
    found: dict[object, list[Recipe]] = {}
    for c in cands:
        found.setdefault(_key(c, task), []).append(c)
    out = []
    for members in found.values():
        if intended in members:
            members.remove(intended)
            members.insert(0, intended)
        out.append(tuple(members))
    return out
