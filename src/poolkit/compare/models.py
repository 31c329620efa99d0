"""Several models in one ``compare`` run: each model's rows in one table, all paired.

Each model runs :func:`poolkit.compare.runner.planned_rows` on the same data, and the rows
of all models are summarized together, on the same bootstrap resamples, so intervals,
``vs *`` and ``vs best`` stay paired across models. ``*`` is the *first* model's intended
pooling; model-free rows (BM25) come once, with the first model; hybrids across models
(``label:row`` names) are fused after every model ran (:mod:`.hybrid_across`); a
multi-vector folder's own recipe takes part beside its rows, as a sparse model's does.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from poolkit.compare import bootstrap as bs
from poolkit.compare.candidates import default_strategies
from poolkit.compare.frontier import untold
from poolkit.compare.hybrid_across import across_rows, default_across, sides_of, split_across
from poolkit.compare.report import Result
from poolkit.compare.runner import Settings, planned_rows
from poolkit.compare.summary import summarize
from poolkit.recipe import Recipe

__all__ = ["Compared", "compare_models", "labels", "untold_rows"]


@dataclass(frozen=True)
class Compared:
    """A run's results (rows order) with each one's evaluation key, and the evaluations
    (what :func:`untold_rows` resamples again)."""

    results: list[Result]
    keys: list[Hashable]
    evaluations: dict[Hashable, Any]


def labels(models: Sequence[str]) -> list[str]:
    """Short, distinct labels of ``models`` (as ``--model`` names them): the folder's or hub
    id's last part, ``#2``, ``#3`` after repeats of it."""
    out: list[str] = []
    for m in models:
        base = Path(str(m).rstrip("/\\")).name or str(m)
        label, k = base, 1
        while label in out:
            k += 1
            label = f"{base}#{k}"
        out.append(label)
    return out


def _own_strategies(encoder: Any, settings: Settings) -> Any:
    """The strategies a model runs with among several: ``settings.strategies``, with a
    multi-vector folder's own recipe added (retrieval), as a sparse model's own row is."""
    info = encoder.info
    own = getattr(info, "multivector", None)
    if settings.task != "retrieval" or not own or not getattr(info, "is_multivector_folder", 0):
        return settings.strategies
    if settings.strategies is None:  # the defaults, the dense intended pooling among them
        intended = str(info.intended_recipe())
        base = default_strategies("sequence")
        return (*base, *([] if intended in base else [intended]), own)
    recipe = Recipe.parse(own)
    return settings.strategies if recipe in settings.strategies else [*settings.strategies, recipe]


def compare_models(
    encoders: Sequence[tuple[str, Any]],
    data: Any,
    settings: Settings,
    train: Any = None,
    quantized: Any = None,
) -> Compared:
    """Score ``encoders`` (``(model as --model names it, Encoder)`` pairs) on ``data``;
    one pair: exactly :func:`poolkit.compare.runner.compare`'s rows. ``quantized``: only
    with one model. ``settings.notes`` gets every model's notes (prefixed by its label when
    there are several)."""
    several = len(encoders) > 1
    names = labels([m for m, _ in encoders])
    rows: list[Any] = []
    evaluations: dict[Hashable, Any] = {}
    across: list[Any] = []
    if several:  # hybrids whose rows are named label:row: fused across models, below
        settings, across = split_across(settings, names, [m for m, _ in encoders])
        if settings.task == "retrieval" and settings.strategies is None:
            across += default_across(encoders, names, across)
    kept: dict[Any, Any] = {}  # label:row -> its key; that key -> its ranking
    every: dict[Hashable, Any] = {}  # every model's rows (BM25 of each too): their costs
    for i, ((model, encoder), label) in enumerate(zip(encoders, names, strict=True)):
        if not several:
            own_rows, own_evals = planned_rows(encoder, data, settings, train, quantized)
            rows += own_rows
            evaluations.update(own_evals)
            continue
        own = replace(settings, strategies=_own_strategies(encoder, settings), notes=[],
                      stages={}, budget_facts={}, cross_sides=sides_of(across, label))  # fmt: skip
        own_rows, own_evals = planned_rows(encoder, data, own, train)
        settings.notes.extend(f"{label}: {n}" for n in own.notes)
        for name, key in own.side_keys.items():
            kept[(i, key)] = own.rankings[key]
            kept[f"{label}:{name}"] = (i, key)
        every.update(((i, r.key), r) for r in own_rows)
        for r in own_rows:
            if i and r.recipe.level == "lexical":
                continue  # model-free (BM25): the first model's row stands for it
            key = (i, r.key)
            rows.append(replace(
                r, key=key, intended=r.intended and i == 0, model=model, model_label=label,
                reference=None if r.reference is None else (i, r.reference),
            ))  # fmt: skip
            evaluations[key] = own_evals[r.key]
    if across:
        more, scored = across_rows(across, kept, every, data, settings.backend)
        rows += more
        evaluations.update(scored)
    results = summarize(settings.task, rows, evaluations, settings.bootstrap, settings.seed)
    return Compared(results, [r.key for r in rows], evaluations)


def untold_rows(run: Compared, chosen: int, resamples: int, seed: int) -> np.ndarray:
    """Which results cannot be told apart from ``run.results[chosen]`` on the main metric:
    bool ``(N,)``, on the table's own resamples (same count, same seed)."""
    boot = bs.resampled_scores({k: run.evaluations[k] for k in run.keys}, resamples, seed)
    main = np.stack([boot[k][:, 0] for k in run.keys], axis=1)  # (R, N)
    point = np.array([next(iter(r.metrics.values())) for r in run.results])
    return untold(point, main, chosen)
