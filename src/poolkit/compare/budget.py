"""Budget rows of `poolkit compare` (``--dims``, ``--precision``): a recipe's output stage
scored on the stored form, derived from the float32 vectors already embedded (no extra
forward pass).

For each base row (the intended one, or every row with ``--budget-rows all``) and each
(dims, precision) pair, the float32 vectors are truncated and quantised with
:mod:`poolkit.output` (:func:`stored`; int8/uint8 ranges from the data compared), then
scored on the stored form: ``sts`` by :func:`pair_similarity`, ``retrieval`` by exact
search (:func:`retrieval_rows`, with a ``+rescore`` row per binary row; each row's search
time by :func:`~poolkit.compare.timing.timed_search`). Other tasks train probes or clusters
on float vectors and take no budget rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from poolkit.compare.hamming import HammingIndex
from poolkit.compare.timing import timed_depths, timed_search
from poolkit.errors import InputError
from poolkit.fitted import Fit, transform_width
from poolkit.output import Calibration, needs_calibration, quantize, unpack_bits
from poolkit.plan import stage_floats
from poolkit.recipe import Recipe

__all__ = [
    "BUDGET_TASKS",
    "RESCORE_FACTOR",
    "Budget",
    "BudgetError",
    "Stage",
    "base_of",
    "pair_similarity",
    "plan",
    "retrieval_rows",
    "stored",
]

BUDGET_TASKS = ("sts", "retrieval")
RESCORE_FACTOR = 4  # +rescore: candidates = 4 x the deepest cut-off, by Hamming distance
_BITS = ("binary", "ubinary")


class BudgetError(InputError):
    """A budget the model's vectors cannot take (a dims wider than they are)."""


@dataclass(frozen=True)
class Budget:
    """What ``--dims``/``--precision``/``--budget-rows`` ask: ``dims`` (None: the full
    width), ``precisions`` (float32 included or not) and which rows get budget twins
    (``"intended"``, or ``"all"``; with no intended row, every row); ``recipes``: budget
    rows named whole (``--recipes mean/256/int8``), each a twin of its recipe without the
    output stage, which must be a compared row."""

    dims: tuple[int | None, ...] = (None,)
    precisions: tuple[str, ...] = ("float32",)
    rows: str = "intended"
    recipes: tuple[Recipe, ...] = ()


@dataclass(frozen=True)
class Stage:
    """One base row's budget rows: its float32 ``width``, whether its recipe normalises,
    and the budget ``recipes`` (output stage set), in (dims, precision) order."""

    width: int
    normalize: bool
    recipes: tuple[Recipe, ...]

    def dims(self, recipe: Recipe) -> int:
        """Width of ``recipe``'s stored vectors (after its fitted transform and /DIMS)."""
        if recipe.dims is not None:
            return recipe.dims
        return self.width if recipe.transform is None else transform_width(recipe.transform,
                                                                             self.width)  # fmt: skip


def row_width(encoder: Any, recipe: Recipe) -> tuple[int, bool]:
    """Width of ``recipe``'s float32 vectors in ``compare`` (after the model's modules
    where they fit) and whether the recipe normalises them; no forward pass."""
    from poolkit.plan import make_plan

    plan = make_plan(encoder, {"r": recipe}, prompt="", pipeline="fit")
    return plan.widths["r"], bool(recipe.resolved_normalize(plan.model_normalize))


def plan(encoder: Any, budget: Budget, bases: Sequence[Recipe]) -> dict[Recipe, Stage]:
    """The budget rows of each base recipe. A dims wider than the vectors raises
    :class:`BudgetError` naming the fix (before any forward pass). The pair
    (full width, float32) is the base row itself and is left out."""
    out: dict[Recipe, Stage] = {}
    wanted: dict[Recipe, list[Recipe]] = {}
    for base in bases:
        wanted[base] = [base.replace(dims=d, precision=p)
                        for d in budget.dims for p in budget.precisions]  # fmt: skip
    for r in budget.recipes:  # named whole: a twin of its own base
        wanted.setdefault(base_of(r), []).append(r)
    for base, asked in wanted.items():
        width, normalize = row_width(encoder, base)
        recipes: list[Recipe] = []
        for r in asked:
            room = width if r.transform is None else transform_width(r.transform, width)
            if r.dims is not None and r.dims > room:
                raise BudgetError(
                    arg="dims", expected=f"at most {room}, the width of {r.pooling if r.transform is None else r.fitted}'s vectors", got=r.dims, fix=f"Keep at most {room} dimensions, e.g. {min(256, room)}."
                )  # fmt: skip
            if r.precision is None and r.transform is None and r.dims in (None, width):
                continue
            if r not in recipes:
                recipes.append(r)
        out[base] = Stage(width, normalize, tuple(recipes))
    return out


def base_of(recipe: Recipe) -> Recipe:
    """``recipe`` without its output stage: the float32 row a budget row is derived from."""
    return recipe.pooling


def stored(
    vectors: np.ndarray,
    recipe: Recipe,
    normalize: bool,
    calibration: Calibration | None = None,
    fit: Fit | None = None,
) -> tuple[np.ndarray, np.ndarray, Calibration | None]:
    """``recipe``'s stored form of float32 ``vectors``: ``(stored, transformed and
    truncated floats, calibration)`` (:func:`poolkit.plan.stage_floats`, ``fit`` for a
    fitted transform); int8/uint8 ranges from ``calibration`` or, when None, from these
    vectors (per dimension min and max, as ``quantize_embeddings`` calibrates)."""
    floats = stage_floats(vectors, recipe, normalize, fit)
    if needs_calibration(recipe.precision) and calibration is None:
        calibration = Calibration.from_vectors(floats, f"{len(floats)} vectors compared")
    return quantize(floats, recipe.precision, calibration), floats, calibration


def _dims(floats: np.ndarray) -> int:
    return int(floats.shape[1])


def pair_similarity(a: np.ndarray, b: np.ndarray, precision: str | None, dims: int) -> np.ndarray:
    """``sts`` similarity of stored rows ``a[i]``, ``b[i]``: ``1 - hamming / dims`` for
    bits, else the cosine of the stored values (int8/uint8 as integers) in float64."""
    if precision in _BITS:
        differ = unpack_bits(a, dims) != unpack_bits(b, dims)
        return 1.0 - differ.sum(axis=1) / dims
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    dots = np.einsum("ij,ij->i", x, y)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def _signs(stored_bits: np.ndarray, dims: int) -> np.ndarray:
    return unpack_bits(stored_bits, dims).astype(np.float32) * 2 - 1


def _dots(queries: np.ndarray, documents: np.ndarray) -> Any:
    """Score blocks for :func:`~poolkit.compare.search.top_k_by`: dot products."""
    return lambda q0, q1, d0, d1: queries[q0:q1] @ documents[d0:d1].T


def _exact_dtype(precision: str | None, dims: int) -> type:
    """float32 while every integer dot product is exact in it (< 2**24), else float64."""
    top = 255 if precision == "uint8" else 128
    return np.float32 if dims * top * top < 2**24 else np.float64


def retrieval_rows(
    queries: np.ndarray,
    documents: np.ndarray,
    stage: Stage,
    depth: int,
    ties: np.ndarray,
    deep: int = 0,
    fits: Mapping[Recipe, Fit] | None = None,
) -> dict[tuple[Recipe, bool], tuple[np.ndarray, float, float, Calibration | None]]:
    """Every budget row of one base recipe: ``(recipe, rescored) -> (ranked document
    indices, search seconds to ``depth``, to ``max(depth, deep)``, calibration)`` from
    float32 ``queries`` and ``documents``. int8/uint8 ranges come from the documents;
    queries use them too. ``deep``: the stored rows are searched to ``max(depth, deep)`` (a
    hybrid fuses them); the ``+rescore`` rows still re-rank the Hamming top
    ``RESCORE_FACTOR x depth``. ``fits``: the fit of each recipe with a fitted transform
    (by :attr:`Recipe.fitted`)."""
    from poolkit.compare.search import top_k, top_k_by

    out: dict[tuple[Recipe, bool], tuple[np.ndarray, float, float, Calibration | None]] = {}
    n_q, n_d = len(queries), len(documents)
    for r in stage.recipes:
        fit = None if r.fitted is None else (fits or {})[r.fitted]
        d_stored, _, cal = stored(documents, r, stage.normalize, fit=fit)
        q_stored, q_floats, _ = stored(queries, r, stage.normalize, cal, fit)
        dims = _dims(q_floats)
        if r.precision in _BITS:
            index = HammingIndex(d_stored, ties)  # faiss where installed, else NumPy
            search: Any = partial(index.search, q_stored)
        elif needs_calibration(r.precision):
            dtype = _exact_dtype(r.precision, dims)
            qi, di = q_stored.astype(dtype), d_stored.astype(dtype)
            search = partial(top_k_by, _dots(qi, di), n_q, n_d, id_order=ties)
        else:  # float32, float16: cosine of the stored values
            qf, df = q_stored.astype(np.float32), d_stored.astype(np.float32)
            search = partial(top_k, qf, df, id_order=ties)
        (ranked, _), own, fused = timed_depths(search, depth, deep)
        out[(r, False)] = (ranked, own, fused, cal)
        if r.precision in _BITS:
            ranked, seconds = timed_search(
                _rescored, q_floats, q_stored, d_stored, index, depth, ties
            )
            out[(r, True)] = (ranked, seconds, seconds, cal)
    return out


def _rescored(
    q_floats: np.ndarray,
    q_stored: np.ndarray,
    d_stored: np.ndarray,
    index: HammingIndex,
    depth: int,
    ties: np.ndarray,
) -> np.ndarray:
    """Top ``depth`` documents per query: the ``RESCORE_FACTOR * depth`` nearest by Hamming
    distance, re-ranked by the float query's dot product with their ±1 bits (ties: larger
    ``ties`` first, as everywhere)."""
    dims = _dims(q_floats)
    wide = min(len(d_stored), RESCORE_FACTOR * depth)
    candidates, _ = index.search(q_stored, wide)
    out = np.empty((len(q_stored), min(depth, wide)), dtype=np.int64)
    for q0 in range(0, len(q_stored), 64):
        cand, q = candidates[q0 : q0 + 64], q_floats[q0 : q0 + 64]
        used, where = np.unique(cand, return_inverse=True)
        if len(used) <= 4 * cand.shape[1]:  # few distinct candidates (a small corpus)
            every = q.astype(np.float64) @ _signs(d_stored[used], dims).T.astype(np.float64)
            scores = np.take_along_axis(every, where.reshape(cand.shape), axis=1)
        else:  # (64, wide, dims) float32 gathered
            signs = _signs(d_stored[cand.ravel()], dims).reshape(*cand.shape, dims)
            scores = np.einsum("qd,qkd->qk", q, signs)
        order = np.lexsort((-ties[cand], -scores), axis=1)[:, :depth]
        out[q0 : q0 + 64] = np.take_along_axis(cand, order, axis=1)
    return out
