"""Hybrid rows of ``compare --task retrieval``: two rows of the same run fused into one
ranking (:mod:`poolkit.compare.fusion`), scored, bootstrapped and paired like any row.

Names, as ``--recipes`` takes them (``A`` and ``B`` are row names of the table:
``mean``, ``bm25``, ``mean/256/int8``, ``mean/binary +rescore``, ``splade``, ...):

- ``rrf(A,B)``: reciprocal rank fusion, ``k`` = 60, over each side's top 1000;
  ``rrf(A,B,k=K,depth=D)`` changes them (the name shows what differs from the defaults).
- ``fuse(A,B,W)``: ``W * A + (1 - W) * B`` of min-max normalised scores over each side's
  top 1000 (``W`` 0..1, default 0.5); ``,norm=z`` for z-scores, ``,depth=D`` as above.
  Rows that keep no scores (the ``/DIMS``, ``/PRECISION`` rows, ``+rescore`` rows,
  chunked documents) fuse by ``rrf`` only.

A side's ranking is as deep as its search gives it: exact searches (dense, BM25, sparse,
MaxSim, MUVERA, stored budget rows) are searched to ``depth`` for a row that is fused; a
``+rescore`` row or a MUVERA ``+rescore`` row holds its re-ranked top 100, a chunked
documents row its top 100. Without ``--recipes`` a retrieval run adds ``rrf(*,bm25)`` and
``rrf(*,S)`` for each sparse row ``S`` (``*``: the intended dense row).

In a run: :func:`row_keys` names every row before any forward pass, :func:`plan` resolves
the hybrids against them, :func:`evaluations` scores them from the rankings kept.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poolkit.compare.fusion import DEPTH, NORMS, RRF_K, Ranking, rrf, score_fusion
from poolkit.errors import InputError

__all__ = [
    "Hybrid",
    "HybridError",
    "default_hybrids",
    "evaluations",
    "fused",
    "parse_hybrid",
    "plan",
    "resolve",
    "row_keys",
    "side_rows",
    "split_hybrids",
]

_NAME = re.compile(r"^\s*(rrf|fuse)\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)


class HybridError(InputError):
    """A hybrid row that names no row of the run, or fuses what it cannot."""


@dataclass(frozen=True)
class Hybrid:
    """A hybrid row: ``method`` ``"rrf"`` or ``"fuse"`` of the rows named ``parts`` (as
    parsed: the comma-separated pieces of the names, joined into two row names by
    :func:`resolve`), with RRF's ``k``, each side's ``depth``, and the score fusion's
    ``weight`` (of the first row) and ``norm``. ``sides``: the two rows' keys once
    resolved; ``models``: each side's ``--model`` for a hybrid across models (its parts
    ``label:row`` as the table names them), else empty."""

    method: str
    parts: tuple[str, ...]
    k: int = RRF_K
    depth: int = DEPTH
    weight: float = 0.5
    norm: str = "minmax"
    sides: tuple[Hashable, ...] = field(default=(), compare=False)
    # A hybrid across models (:mod:`poolkit.compare.models`): each side's --model.
    models: tuple[Any, ...] = field(default=(), compare=False)
    level = "hybrid"
    kind = "hybrid"
    layers = None
    precision = None
    dims = None
    muvera = None
    has_output_stage = False

    def __str__(self) -> str:
        args = list(self.parts)
        if self.method == "fuse":
            args.append(f"{self.weight:g}")
            if self.norm != "minmax":
                args.append(f"norm={self.norm}")
        elif self.k != RRF_K:
            args.append(f"k={self.k}")
        if self.depth != DEPTH:
            args.append(f"depth={self.depth}")
        return f"{self.method}({','.join(args)})"

    @property
    def strategy(self) -> str:
        return str(self)


def _bad(name: str, *, expected: str, fix: str = "") -> HybridError:
    """``--recipes`` refused for the hybrid row ``name``."""
    return HybridError(arg="--recipes", expected=expected, got=name, fix=fix)


def parse_hybrid(name: Any) -> Hybrid | None:
    """The :class:`Hybrid` named ``name`` (``rrf(mean,bm25)``, ``fuse(mean,bm25,0.3)``), or
    None for a name that is not a hybrid's. Raises :class:`HybridError` for a malformed
    one."""
    if isinstance(name, Hybrid):
        return name
    m = _NAME.match(name) if isinstance(name, str) else None
    if m is None:
        return None
    method = m.group(1).lower()
    pieces = [p.strip() for p in m.group(2).split(",")]
    options: dict[str, Any] = {}
    while pieces and re.fullmatch(r"(k|depth|norm)\s*=.*", pieces[-1]):
        key, _, raw = pieces.pop().partition("=")
        options[key.strip()] = raw.strip()
    weight = 0.5
    if method == "fuse" and len(pieces) > 2 and re.fullmatch(r"[0-9.eE+-]+", pieces[-1]):
        try:
            weight = float(pieces.pop())
        except ValueError:
            raise _bad(name, expected="fuse(A,B,W) with a number W",
                       fix="e.g. fuse(mean,bm25,0.5).") from None  # fmt: skip
    if len(pieces) < 2 or not all(pieces):
        raise _bad(name, expected=f"{method}(A,B) of two row names",
                   fix=f"e.g. {method}(mean,bm25).")  # fmt: skip
    try:
        k = int(options.pop("k", RRF_K))
        depth = int(options.pop("depth", DEPTH))
    except ValueError:
        raise _bad(name, expected="whole numbers k and depth",
                   fix="e.g. rrf(mean,bm25,k=60).") from None  # fmt: skip
    norm = options.pop("norm", "minmax")
    if method == "rrf" and norm != "minmax":
        raise _bad(name, expected="rrf() without norm= (a fuse() option; rrf fuses ranks)")
    if method == "fuse" and k != RRF_K:
        raise _bad(name, expected="fuse() without k= (an rrf() option; fuse() weighs scores: "
                   "fuse(A,B,W))")  # fmt: skip
    if k < 0 or depth < 1 or not 0.0 <= weight <= 1.0 or norm not in NORMS:
        raise _bad(name, expected=f"k >= 0, depth >= 1, a weight in 0..1 and norm "
                   f"{' or '.join(NORMS)}")  # fmt: skip
    return Hybrid(method, tuple(pieces), k, depth, weight, norm)


def split_hybrids(names: Sequence[Any] | None) -> tuple[list[Any] | None, list[Hybrid]]:
    """``(other names, hybrids)`` of ``names`` (None stays None)."""
    if names is None:
        return None, []
    rest: list[Any] = []
    hybrids: list[Hybrid] = []
    for n in names:
        h = parse_hybrid(n)
        if h is None:
            rest.append(n)
        elif h not in hybrids:
            hybrids.append(h)
    return rest, hybrids


def default_hybrids(dense: Any, extra: Sequence[Any]) -> list[Hybrid]:
    """``rrf(dense, X)`` for each BM25 and sparse row ``X`` of ``extra``."""
    if dense is None:
        return []
    return [Hybrid("rrf", (str(dense), str(x))) for x in extra]


def resolve(hybrids: Sequence[Hybrid], keys: Mapping[str, Hashable]) -> list[Hybrid]:
    """Each hybrid with its ``parts`` joined into two row names of ``keys`` (row name ->
    row key) and ``sides`` set; raises :class:`HybridError` naming the known rows for a
    part that names none."""
    out = []
    for h in hybrids:
        found = None
        for cut in range(1, len(h.parts)):
            a, b = ",".join(h.parts[:cut]), ",".join(h.parts[cut:])
            if a in keys and b in keys:
                found = (a, b)
                break
        if found is None:
            unknown = next((p for p in h.parts if p not in keys), ",".join(h.parts))
            raise _bad(str(h), expected=f"a hybrid of rows of this run (rows: {', '.join(keys)})",
                       fix=f"No row is named {unknown!r}: add it to --recipes.")  # fmt: skip
        if found[0] == found[1]:
            raise _bad(str(h), expected="a hybrid of two different rows (not of a row with itself)",
                       fix="Name two different rows.")  # fmt: skip
        out.append(replace(h, parts=found, sides=(keys[found[0]], keys[found[1]])))
    return out


def fused(
    hybrid: Hybrid, rankings: Mapping[Hashable, Ranking], n_docs: int, id_order: np.ndarray
) -> np.ndarray:
    """The fused ranking ``(Q, K)`` of a resolved ``hybrid`` from its sides' rankings."""
    a, b = (rankings[s] for s in hybrid.sides)
    if hybrid.method == "rrf":
        return rrf(a.ranked, b.ranked, n_docs, id_order, hybrid.k, hybrid.depth)
    for name, side in zip(hybrid.parts, (a, b), strict=True):
        if side.scores is None:
            raise _bad(str(hybrid), expected="a fuse() of rows that keep scores to normalise",
                       fix=f"{name} keeps none (a /DIMS, /PRECISION, +rescore or chunked row): "
                       "fuse it by rrf.")  # fmt: skip
    return score_fusion(a.ranked, a.scores, b.ranked, b.scores, n_docs, id_order,
                        hybrid.weight, hybrid.norm, hybrid.depth)  # fmt: skip


def side_rows(hybrid: Hybrid) -> list[tuple[str, Any, bool, str | None]]:
    """Each side of a resolved ``hybrid`` as ``(row name, recipe, rescore, documents)``:
    what its ``embed`` command needs."""
    out = []
    for name, side in zip(hybrid.parts, hybrid.sides, strict=True):
        recipe, label = side[1] if hybrid.models else side  # across models: (model, key)
        documents = label if label not in (None, "stored", "rescore") else None
        out.append((name, recipe, label == "rescore", documents))
    return out


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
                raise _bad(str(h), expected="a fuse() of rows that keep scores to normalise",
                           fix=f"{name} keeps none (a /DIMS, /PRECISION, +rescore or chunked "
                           "row): fuse it by rrf.")  # fmt: skip
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
