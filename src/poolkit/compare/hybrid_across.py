"""Hybrid rows across models in one ``compare --task retrieval`` run with several
``--model``: ``rrf(A,B)`` / ``fuse(A,B,W)`` of rows of two models, named as the table
prints them (``label:row``, e.g. ``rrf(minilm:mean,splade:splade)``).

Each model keeps the rankings its rows give such a hybrid (:func:`sides_of`); once every
model ran they are fused and scored as any row (:func:`across_rows`), the cost being the
sum of the two rows'. Without ``--recipes``: :func:`default_across`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from poolkit.compare.hybrid import Hybrid, HybridError, fused, split_hybrids

__all__ = ["across_rows", "default_across", "sides_of", "split_across"]


def _qualified(part: str, names: Sequence[str]) -> bool:
    label, colon, row = part.partition(":")
    return bool(colon and row) and label in names


def _across(h: Hybrid, names: Sequence[str], models: Sequence[Any]) -> Hybrid:
    """``h`` with its parts cut into two ``label:row`` names and each side's model set;
    raises :class:`HybridError` when no cut names two rows of known models."""
    for cut in range(1, len(h.parts)):
        a, b = ",".join(h.parts[:cut]), ",".join(h.parts[cut:])
        if _qualified(a, names) and _qualified(b, names):
            if a == b:
                raise HybridError(f"--recipes {h}: fuses a row with itself; name two "
                                  "different rows.")  # fmt: skip
            which = [models[names.index(p.partition(":")[0])] for p in (a, b)]
            return replace(h, parts=(a, b), models=tuple(which))
    raise HybridError(
        f"--recipes {h}: with several --model, name both rows as the table prints them, "
        f"label:row, the label one of {', '.join(names)} (e.g. rrf({names[0]}:mean,"
        f"{names[-1]}:mean)); a hybrid of one model's rows: rrf(A,B) without labels."
    )


def split_across(
    settings: Any, names: Sequence[str], models: Sequence[Any]
) -> tuple[Any, list[Hybrid]]:
    """``(settings less the hybrids across models, those hybrids)``: a hybrid is across
    models when one of its parts starts with a model's label and ``:`` (``names``: the
    models' labels, ``models``: each as ``--model`` names it)."""
    rest, named = split_hybrids(settings.strategies)
    keep: list[Any] = []
    across: list[Hybrid] = []
    for h in [*settings.hybrids, *named]:
        if any(_qualified(p, names) for p in h.parts):
            across.append(_across(h, names, models))
        else:
            keep.append(h)
    if not across:
        return settings, []
    own = [h for h in keep if h not in settings.hybrids]
    strategies = None if settings.strategies is None else [*(rest or []), *own]
    hybrids = [h for h in keep if h in settings.hybrids]
    return replace(settings, strategies=strategies, hybrids=tuple(hybrids)), across


def default_across(
    encoders: Sequence[tuple[Any, Any]], names: Sequence[str], given: Sequence[Hybrid]
) -> list[Hybrid]:
    """``rrf(D:*,S:own)`` for each dense model ``D`` (its intended row) and each SPLADE
    model ``S`` (its own sparse row), in ``--model`` order, less those in ``given``."""
    dense, sparse = [], []
    for (model, encoder), label in zip(encoders, names, strict=True):
        info = encoder.info
        own = info.intended_recipe()
        if own.kind != "dense":
            sparse.append((model, f"{label}:{own}"))
        elif not getattr(info, "is_multivector_folder", False):
            dense.append((model, f"{label}:{own}"))
    out = []
    for dm, d in dense:
        for sm, s in sparse:
            h = Hybrid("rrf", (d, s), models=(dm, sm))
            if h not in given and h not in out:
                out.append(h)
    return out


def sides_of(across: Sequence[Hybrid], label: str) -> dict[str, tuple[str, str, int]]:
    """The rows of the model labelled ``label`` that ``across`` fuses: row name -> (the
    hybrid's name, ``label``, the depth to keep; the deepest of its hybrids)."""
    out: dict[str, tuple[str, str, int]] = {}
    for h in across:
        for part in h.parts:
            owner, _, row = part.partition(":")
            if owner == label:
                depth = max(h.depth, out.get(row, ("", "", 0))[2])
                out[row] = (out.get(row, (str(h),))[0], label, depth)
    return out


def across_rows(
    across: Sequence[Hybrid],
    kept: Mapping[Any, Any],
    rows: Mapping[Hashable, Any],
    data: Any,
    backend: str | None = None,
) -> tuple[list[Any], dict[Hashable, Any]]:
    """The hybrid rows across models and their evaluations (by row key ``(hybrid, None)``).

    ``kept``: ``"label:row"`` -> that row's key in the run, and that key -> its kept
    :class:`~poolkit.compare.fusion.Ranking`; ``rows``: every model's rows by key (each
    side's cost)."""
    from poolkit.compare.cost import hybrid_cost
    from poolkit.compare.evaluation import QueryEval
    from poolkit.compare.retrieval import query_metrics
    from poolkit.compare.search import id_order
    from poolkit.compare.summary import Row

    ties = id_order(data.doc_ids)
    n = len(data.documents)
    out, scored = [], {}
    for h in across:
        h = replace(h, sides=tuple(kept[p] for p in h.parts))
        key = (h, None)
        scored[key] = QueryEval(query_metrics(fused(h, kept, n, ties), data.qrels, n))
        out.append(hybrid_cost(Row(key, h, (h,), backend=backend), [rows[k] for k in h.sides]))
    return out, scored
