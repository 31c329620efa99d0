"""Hybrid rows in a ``compare --task retrieval`` run (:mod:`poolkit.compare.hybrid`):
the row names a run will have, the hybrids resolved against them before any forward pass,
and their evaluations from the rankings the scorers kept."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from poolkit.compare.hybrid import Hybrid, HybridError, fused, resolve

__all__ = ["evaluations", "plan", "row_keys"]


def row_keys(
    grouped: Sequence[Sequence[Any]], settings: Any, extra: Sequence[Any], rerank: str
) -> dict[str, Hashable]:
    """Every row name a retrieval run will have (before any forward pass) -> its key: the
    strategy rows and their merged members, MUVERA ``+rescore`` rows (``rerank``: their
    key's label), budget rows (binary: and ``+rescore``), sparse and BM25 rows, document
    rows."""
    from poolkit.compare.documents import labels, late_ok
    from poolkit.compare.report import DOCUMENT_MARK

    keys: dict[str, Hashable] = {}
    for g in grouped:
        for member in g:
            keys.setdefault(str(member), (g[0], None))
        if g[0].level == "multivector" and g[0].muvera is not None:
            keys[f"{g[0]} +rescore"] = (g[0], rerank)
    for stage in getattr(settings, "stages", {}).values():
        for r in stage.recipes:
            keys[str(r)] = (r, "stored")
            if r.precision in ("binary", "ubinary"):
                keys[f"{r} +rescore"] = (r, "rescore")
    for r in extra:
        keys[str(r)] = (r, None)
    base = getattr(settings, "document_base", None)
    if base is not None:
        window = settings.long_text != "window"
        for label in labels(settings.chunk_tokens, window, late_ok(base)):
            keys[f"{base} {DOCUMENT_MARK} {label}"] = (base, label)
    return keys


def plan(settings: Any, keys: Mapping[str, Hashable]) -> list[Hybrid]:
    """Resolve ``settings.hybrids`` against ``keys`` (:func:`row_keys`) and ask the scorers
    to keep each fused row's ranking to its hybrid's depth (``settings.keep``), and each
    row of ``settings.cross_sides`` (a hybrid across models fuses it; its key set in
    ``settings.side_keys``). Raises :class:`HybridError` naming the rows for one that is
    none of them."""
    hybrids = resolve(settings.hybrids, keys)
    for h in hybrids:  # before any forward pass: fuse() needs both rows' scores
        for name, (_, label) in zip(h.parts, h.sides, strict=True):
            if h.method == "fuse" and label is not None:
                raise HybridError(arg="--recipes", expected="a fuse() of rows that keep scores to "
                                  "normalise", got=str(h), fix=f"{name} keeps none (a /DIMS, "
                                  "/PRECISION, +rescore or chunked row): fuse it by rrf.")  # fmt: skip
    settings.keep = {}
    settings.rankings = {}
    for h in hybrids:
        for side in h.sides:
            settings.keep[side] = max(settings.keep.get(side, 0), h.depth)
    settings.side_keys = {}
    for name, (hybrid, label, depth) in getattr(settings, "cross_sides", {}).items():
        if name not in keys:  # a hybrid across models names a row this model has not
            raise HybridError(f"--recipes {hybrid}: no row named {label}:{name} in this run "
                              f"(rows of {label}: {', '.join(f'{label}:{k}' for k in keys)}); "
                              "add it to --recipes.")  # fmt: skip
        if hybrid.startswith("fuse") and keys[name][1] is not None:
            raise HybridError(f"--recipes {hybrid}: {label}:{name} keeps no scores to "
                              "normalise (a /DIMS, /PRECISION, +rescore or chunked row); "
                              "fuse it by rrf.")  # fmt: skip
        settings.side_keys[name] = keys[name]
        settings.keep[keys[name]] = max(settings.keep.get(keys[name], 0), depth)
    return hybrids


def evaluations(hybrids: Sequence[Hybrid], settings: Any, data: Any) -> dict[Hashable, Any]:
    """Each resolved hybrid's :class:`~poolkit.compare.evaluation.QueryEval`, by row key
    ``(hybrid, None)``, from the rankings the scorers kept."""
    from poolkit.compare.evaluation import QueryEval
    from poolkit.compare.retrieval import query_metrics
    from poolkit.compare.search import id_order

    ties = id_order(data.doc_ids)
    n = len(data.documents)
    return {
        (h, None): QueryEval(query_metrics(fused(h, settings.rankings, n, ties), data.qrels, n))
        for h in hybrids
    }
