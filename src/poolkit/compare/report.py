"""Results of `poolkit compare`: the ranked table, the JSON file and the bar chart."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolkit.compare.bootstrap import Paired
from poolkit.compare.ranking import rank, tie_key, tied
from poolkit.compare.timing import SEARCH_TIMING

# One atomic writer for the package: temporary file, fsync, rename (never half a file).
from poolkit.io.atomic import atomic_write
from poolkit.layers import layer_name
from poolkit.recipe import Recipe

__all__ = [
    "DOCUMENT_MARK",
    "EXPLAIN_HINT",
    "MAIN_METRIC",
    "METRICS",
    "UNITS",
    "Cells",
    "Result",
    "RowFacts",
    "bootstrap_info",
    "cells",
    "footer",
    "footer_parts",
    "frontier_footer",
    "rank",
    "table",
    "tied",
    "to_json",
    "write_json",
    "write_plot",
]

# Every metric per task, the main one (ranking key) first. All are fractions.
METRICS: dict[str, tuple[str, ...]] = {
    "sts": ("spearman", "pearson"),
    "classification": ("accuracy", "macro_f1"),
    "ner": ("entity_f1", "token_accuracy"),
    "relation": ("macro_f1", "accuracy"),
    "retrieval": ("ndcg_at_10", "mrr_at_10", "recall_at_100", "map_at_100"),
    "clustering": ("v_measure",),
}
# What one bootstrap resample draws.
UNITS = {
    "sts": "pairs",
    "classification": "examples (out-of-fold predictions under CV)",
    "ner": "sentences",
    "relation": "examples (out-of-fold predictions under CV)",
    "retrieval": "queries",
    "clustering": "texts (cluster assignments kept)",
}
MAIN_METRIC = {task: names[0] for task, names in METRICS.items()}
# Between a document row's recipe and its documents' representation (``mean · window``).
DOCUMENT_MARK = "\u00b7"


@dataclass(frozen=True, kw_only=True)
class RowFacts:
    """What a row is beside its recipe and scores, as ``compare``'s options set it (see
    :class:`Result`); a planned row (:class:`poolkit.compare.summary.Row`) carries them to
    its result as they are. Keyword-only."""

    backend: str | None = None
    quantize: str | None = None
    speedup: float | None = None
    seconds: float | None = None
    dims: int | None = None
    bytes_per_vector: int | None = None
    rescore: bool = False
    search_ms: float | None = None
    calibration: str | None = None
    ranges: Any = None
    documents: str | None = None
    vectors_per_document: float | None = None
    active_dims_query: float | None = None
    active_dims_document: float | None = None
    flops: float | None = None
    bytes_per_document: float | None = None
    bytes_per_document_f16: float | None = None
    # Several models in one run (:mod:`poolkit.compare.models`): the row's ``--model`` as
    # given, and its short label (set only with several models; the name's prefix).
    model: str | None = None
    model_label: str | None = None
    # Encoding one query (BM25: tokenising), measured in the run; the whole query cost is
    # this plus ``search_ms`` (:attr:`Result.query_ms`).
    encode_ms: float | None = None
    search_growth: str | None = None
    # The row's search to the deeper cut a hybrid fusing it needs (None: search_ms's).
    fused_search_ms: float | None = None
    # A fitted row (:mod:`poolkit.compare.fits`): what it was fitted on, the fit's file
    # (what `poolkit embed --fit` reads) and the seconds the fit took.
    fit: str | None = None
    fit_file: str | None = None
    fit_seconds: float | None = None


@dataclass(frozen=True)
class Result(RowFacts):
    """One row's scores: ``metrics`` maps each name of ``METRICS[task]`` to a fraction.

    ``str(recipe)`` is the row's name (``poolkit embed --recipe`` takes it). ``ci``: the 95%
    bootstrap interval per metric (empty with the bootstrap off); ``vs_intended`` /
    ``vs_best``: the main metric minus the intended / best row's, paired (None where there
    is none); ``members``: every recipe the row stands for (:mod:`.grouping`), ``recipe``
    first; ``vs_fp32``: an int8 or budget row against its fp32 / float32 full-width row
    (``speedup``, ``seconds``: model time). The other facts: :class:`RowFacts` (budget rows:
    ``dims``, ``bytes_per_vector``, ``rescore``, ``calibration``, ``ranges``, ``search_ms``;
    document rows: ``documents`` (``"window"``, ``"naive tokens:N"``, ``"late tokens:N"``)
    and ``vectors_per_document``). ``frontier_bytes`` / ``frontier_query``: whether no other
    row beats the main metric at no more bytes per document / query time (False for an
    unknown cost; None without a frontier).
    """

    recipe: Recipe
    metrics: dict[str, float]
    intended: bool = False
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    vs_intended: Paired | None = None
    vs_best: Paired | None = None
    members: tuple[Recipe, ...] = ()
    vs_fp32: Paired | None = None
    frontier_bytes: bool | None = None
    frontier_query: bool | None = None

    @property
    def name(self) -> str:
        """The recipe's name, ``+rescore`` after it for a re-scored binary row, `` · `` and
        the documents' representation for a document row (``mean · late tokens:128``);
        with several models, the model's label and ``:`` before it (``minilm:mean``)."""
        return (
            (f"{self.model_label}:" if self.model_label else "")
            + str(self.recipe)
            + (f" {DOCUMENT_MARK} {self.documents}" if self.documents else "")
            + (" +rescore" if self.rescore else "")
        )

    @property
    def query_ms(self) -> float | None:
        """The whole query cost, ms per query: encoding it (``encode_ms``) plus the search
        (``search_ms``); None where either is unknown."""
        if self.encode_ms is None or self.search_ms is None:
            return None
        return self.encode_ms + self.search_ms

    @property
    def label(self) -> str:
        return f"{self.name} [{self.quantize}]" if self.quantize else self.name

    @property
    def strategy(self) -> str:
        return self.recipe.strategy


def _signed(x: float) -> str:
    return f"{x:+.4f}".replace("-", "\u2212")


def _paired_text(p: Paired) -> str:
    lo, hi = p.ci
    return f"{_signed(p.difference)} [{_signed(lo)}, {_signed(hi)}]"


def _vs_cells(vs: Paired | None) -> list[str]:
    return [_paired_text(vs), "yes" if vs.significant else "no"] if vs else ["", "-"]


@dataclass(frozen=True)
class Cells:
    """The table as cells, best first: ``head``, one list of strings per row of ``ranked``,
    and which columns hold numbers (right-aligned). The terminal table and the HTML report
    print these same cells."""

    head: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    ranked: list[Result]
    ties: list[bool]


def _sparse_cells(r: Result) -> list[str]:
    """A sparse row's active dimensions, FLOPS and bytes per document with float16 weights
    (its float32 bytes are the ``bytes/doc`` cost column); blanks otherwise."""
    if r.flops is None:
        return ["", "", "", ""]
    assert r.bytes_per_document_f16 is not None
    return [f"{r.active_dims_query:.1f}", f"{r.active_dims_document:.1f}", f"{r.flops:.1f}",
            f"{r.bytes_per_document_f16:.0f}"]  # fmt: skip


def _frontier_cell(r: Result) -> str:
    """Which frontiers a row is on: ``bytes``, ``query``, both, or blank."""
    return " ".join(n for n, on in (("bytes", r.frontier_bytes), ("query", r.frontier_query)) if on)


def _cost_cells(r: Result) -> list[str]:
    """A row's cost (:mod:`poolkit.compare.cost`): bytes per document, the index at 1M and
    100M documents, and the whole query cost (encoding + search) in ms; blank where
    unknown."""
    from poolkit.compare.cost import human_bytes, index_bytes

    sizes = index_bytes(r.bytes_per_document)
    return [
        "" if r.bytes_per_document is None else f"{r.bytes_per_document:.0f}",
        "" if sizes is None else "|".join(human_bytes(x) for x in sizes),
        "" if r.query_ms is None else f"{r.query_ms:.2f}",
    ]


def cells(task: str, results: Sequence[Result], bootstrap: dict | None = None) -> Cells:
    """The cells of :func:`table` (see there for what each column holds)."""
    names = METRICS[task]
    main = names[0]
    ranked = rank(results, main)
    ties = tied(ranked, main)
    show_backend = any(r.quantize for r in ranked)
    show_sparse = any(r.flops is not None for r in ranked)
    show_front = any(r.frontier_bytes is not None for r in ranked)
    show_cost = any(r.search_growth is not None for r in ranked)
    # With the cost columns, bytes/doc says what bytes (per vector) would: one column.
    show_bytes = not show_cost and any(r.bytes_per_vector is not None for r in ranked)
    has_ci = bootstrap is not None and all(r.ci for r in ranked)
    has_vs = has_ci and any(r.vs_intended is not None for r in ranked)
    head = [
        "#", "recipe",
        *(["backend"] if show_backend else []),
        *(["frontier"] if show_front else []),
        *(["bytes"] if show_bytes else []),
        *(["q dims", "d dims", "FLOPS", "bytes/doc f16"] if show_sparse else []),
        *(["bytes/doc", "index 1M|100M", "query ms"] if show_cost else []),
        *(f"{n} [95% CI]" if has_ci else n for n in names),
        *(["vs * [95% CI]", "sig"] if has_vs else []),
    ]  # fmt: skip

    def metric(r: Result, n: str) -> str:
        if not has_ci:
            return f"{r.metrics[n]:.4f}"
        lo, hi = r.ci[n]
        return f"{r.metrics[n]:.4f} [{lo:.4f}, {hi:.4f}]"

    rows = []
    first = {}  # tied rows share the rank of the first of them
    for i, (r, tie) in enumerate(zip(ranked, ties, strict=True), 1):
        vs = r.vs_intended
        place = first.setdefault(tie_key(r.metrics[main]), i)
        rows.append(
            [
                f"{place}=" if tie else str(i),
                r.name + (" *" if r.intended else "")
                + (f" (= {', '.join(map(str, r.members[1:]))})" if len(r.members) > 1 else ""),
                *([f"{r.backend or 'torch'} {r.quantize or 'fp32'}"] if show_backend else []),
                *([_frontier_cell(r)] if show_front else []),
                *([str(r.bytes_per_vector or "")] if show_bytes else []),
                *(_sparse_cells(r) if show_sparse else []),
                *(_cost_cells(r) if show_cost else []),
                *(metric(r, n) for n in names),
                *(_vs_cells(vs) if has_vs else []),
            ]
        )  # fmt: skip
    n_text = 2 + show_backend + show_front
    numeric = [False] * n_text + [True] * (len(head) - n_text)
    return Cells(head, rows, numeric, ranked, ties)


def table(
    task: str,
    results: Sequence[Result],
    intended_note: str = "",
    bootstrap: dict | None = None,
    explain: bool = True,
) -> str:
    """The terminal table, best first, one row per recipe (named as ``--recipe`` takes it):
    ``*`` marks the intended pooling, ``=`` after a rank a tie, ``(= ...)`` the recipes a
    merged row stands for; with ``bootstrap`` (:func:`bootstrap_info`) each metric carries
    its 95% interval and the ``vs *`` / ``sig`` columns compare each row with the intended
    one (paired). Then ``intended_note`` and the footer lines (:func:`footer`; the
    definitions only with ``explain``)."""
    c = cells(task, results, bootstrap)
    widths = [max(len(x) for x in col) for col in zip(c.head, *c.rows, strict=True)]

    def line(row: list[str]) -> str:
        return "  ".join(
            x.rjust(w) if num or j == 0 else x.ljust(w)
            for j, (x, w, num) in enumerate(zip(row, widths, c.numeric, strict=True))
        ).rstrip()

    out = [line(c.head), line(["-" * w for w in widths]), *(line(r) for r in c.rows)]
    if intended_note:
        out.append(intended_note)
    out.extend(footer(task, c.ranked, c.ties, bootstrap, explain))
    return "\n".join(out)


class _Fact(str):
    """A footer line that reports this run (a figure, a row left out), not a definition:
    printed without ``--explain`` too (:func:`footer_parts`)."""


def footer_parts(
    task: str, ranked: Sequence[Result], ties: Sequence[bool], bootstrap: dict | None
) -> tuple[list[str], list[str]]:
    """The lines under the table as ``(facts, definitions)``: what this run found (the
    interval's resamples, the top rows, int8 rows against fp32, rows left off a frontier,
    vectors stored per document) and what the columns and row kinds mean (``--explain``)."""
    main = METRICS[task][0]
    out: list[str] = []
    if any(len(r.members) > 1 for r in ranked):
        out.append(
            "(= ...) rows that cannot differ: under cosine similarity sum, mean and "
            "mean_sqrt_len rescale each vector, so they score identically; one row each."
        )
    if any(ties):
        out.append(
            f"n= rows tied on {main}: ordered intended first, then by the other metrics, "
            "then candidate order."
        )
    sections = (_budget_footer(task, ranked) + _multivector_footer(ranked)
                + _document_footer(ranked) + _hybrid_footer(ranked) + _cost_footer(ranked)
                + frontier_footer(task, ranked))  # fmt: skip
    if bootstrap is None:
        out += [_Fact("no confidence intervals (--bootstrap 0)."), *sections]
    else:
        level = round(100 * bootstrap["level"])
        out.append(_Fact(
            f"[{level}% CI]: percentile bootstrap, {bootstrap['resamples']} resamples of the "
            f"{bootstrap['units']} {bootstrap['unit']}, seed {bootstrap['seed']}."
        ))  # fmt: skip
        if any(r.vs_intended is not None for r in ranked):
            out.append(
                f"sig: paired bootstrap test at the {level}% level on the same resamples: yes "
                f"when the interval of ({main} of the row - {main} of *) excludes 0."
            )
        same = [i for i, r in enumerate(ranked[1:], 2) if r.vs_best and not r.vs_best.significant]
        if same:
            listed = ", ".join(f"#{i}" for i in same)
            out.append(_Fact(
                f"top rows: #1 {ranked[0].label} is not distinguishable from {listed} on "
                f"{main} (paired {level}% interval of the difference includes 0)."
            ))  # fmt: skip
        elif len(ranked) > 1:
            out.append(_Fact(f"top rows: #1 {ranked[0].label} is better than every other row "
                             f"on {main} (paired {level}% intervals exclude 0)."))  # fmt: skip
        out.extend(sections)
    for r in ranked:
        if r.vs_fp32 is not None and r.quantize:
            speed = f", {r.speedup:.1f}x faster" if r.speedup else ""
            out.append(_Fact(
                f"{r.quantize} ({r.recipe}): {_paired_text(r.vs_fp32)} {main} vs fp32{speed} "
                f"(model time, same run)."
            ))  # fmt: skip
    return ([str(x) for x in out if isinstance(x, _Fact)],
            [str(x) for x in out if not isinstance(x, _Fact)])  # fmt: skip


# The line that stands for the definitions when they are left out.
EXPLAIN_HINT = "--explain: what each column, mark and row kind means."


def footer(
    task: str,
    ranked: Sequence[Result],
    ties: Sequence[bool],
    bootstrap: dict | None,
    explain: bool = True,
) -> list[str]:
    """Lines under the table (:func:`footer_parts`): the facts, then the definitions
    (``explain``; else one line naming ``--explain`` where there are any)."""
    facts, definitions = footer_parts(task, ranked, ties, bootstrap)
    if explain:
        return facts + definitions
    return facts + ([EXPLAIN_HINT] if definitions else [])


_STORED_SCORES = {
    "sts": "cosine of the stored values, int8 as integers; 1 - hamming/dims for bits",
    "retrieval": "exact search: cosine for floats, int8 dot products, Hamming distance for bits",
}


def frontier_footer(task: str, ranked: Sequence[Result]) -> list[str]:
    """Lines on the frontier column (:mod:`poolkit.compare.frontier`): what it marks, and
    the rows left off a frontier for want of their cost."""
    if not any(r.frontier_bytes is not None for r in ranked):
        return []
    from poolkit.compare.frontier import QUERY_COST, QUERY_NOISE, bytes_cost

    main = METRICS[task][0]
    out = [
        f"frontier: bytes = no other row has a higher {main} at no more bytes per document, "
        "query = at no more query time (encoding + search, ms per query; times within "
        f"{QUERY_NOISE:.0%} of each other count as the same: run-to-run noise); of #1 and the "
        "rows the paired test cannot tell from it, only the cheapest; ties on both: each row "
        "marked."
    ]
    for front, what, cost in (("bytes", "no bytes per document", bytes_cost),
                              ("query", "no query time", QUERY_COST)):  # fmt: skip
        missing = [r.label for r in ranked if cost(r) is None]
        if len(missing) == len(ranked):
            out.append(_Fact(f"frontier: no {front} frontier ({what} in this run)."))
        elif missing:
            out.append(_Fact(f"frontier: off the {front} frontier ({what} in this run): "
                             f"{', '.join(missing)}."))  # fmt: skip
    return out


def _multivector_footer(ranked: Sequence[Result]) -> list[str]:
    """Lines on multi-vector rows (:mod:`poolkit.compare.multivector`)."""
    multi = [r for r in ranked if r.recipe.level == "multivector"]
    if not multi:
        return []
    from poolkit.compare.retrieval import DEPTH

    out = [
        "multivector rows: exact MaxSim of the query's token vectors (query side of the model "
        "folder) against every document's (document side); /poolF pools documents only; "
        "/muvera: one MUVERA vector per text, searched by dot product; bytes/doc: "
        "(tokens kept x width x bytes, mean over the corpus; MUVERA: its vector); token "
        "vectors from the dense rows' forward pass where the tokens are the same (a plain "
        "encoder, texts truncated, each side with the dense rows' prompt), else one pass a side."
    ]
    if any(r.rescore for r in multi):
        out.append(f"+rescore on a /muvera row: its top {DEPTH} re-ranked by MaxSim of the same "
                   "recipe without /muvera (bytes/doc: the MUVERA vector and the tokens).")  # fmt: skip
    return out


def _budget_footer(task: str, ranked: Sequence[Result]) -> list[str]:
    """Lines on budget rows: what bytes and the scores mean, the int8 ranges, the rescore
    rows, the search time per query."""
    budget = [r for r in ranked if r.recipe.has_output_stage and r.bytes_per_vector
              and r.recipe.level != "multivector"]  # fmt: skip
    if not budget:
        return []
    per_vector = "" if any(r.search_growth for r in ranked) else "bytes: per stored vector. "
    out = [
        f"{per_vector}/DIMS, /PRECISION rows: the float32 vectors truncated "
        f"and stored as the recipe says, scored on the stored form ({_STORED_SCORES[task]}); "
        "vs *: paired with the float32 full-width intended row."
    ]
    cal = next((r.calibration for r in budget if r.calibration), None)
    if cal:
        queries = "; queries quantised with the documents' ranges" if task == "retrieval" else ""
        out.append(
            f"int8/uint8 ranges: per-dimension min and max of the {cal}' vectors{queries}; "
            "--json keeps them, and `poolkit embed --ranges THAT.json` reuses them "
            "(--calibrate FILE: ranges from every text of FILE)."
        )
    fitted = [r for r in budget if r.fit is not None]
    if any(not str(r.recipe.transform).startswith("proj") for r in fitted):
        out.append(
            "/TRANSFORM rows (fitted: /pcaK, /whiten[K], /abttD): the base row's float32 "
            "vectors mapped by a transform fitted without labels, never on the texts scored "
            "(queries, test pairs), then /DIMS and /PRECISION; `poolkit embed --fit FILE` "
            "applies the same fit (docs/fitted.md)."
        )
    if fitted:
        out.append(_Fact("fitted or trained on: " + "; ".join(
            f"{r.label} {r.fit} in {r.fit_seconds:.2f} s" for r in fitted) + "."))  # fmt: skip
        if any(str(r.recipe.transform).startswith("proj") for r in fitted):
            out.append(
                "/projK rows (trained): a linear projection to K dimensions trained with the "
                "encoder frozen, started from PCA, the epoch that ranks a held-out tenth best "
                "kept, seeded by --seed: sts, CoSENT on --train's gold scores; retrieval, "
                "InfoNCE on the --train split's judged pairs (docs/fitted.md)."
            )
    if any(r.rescore for r in budget):
        from poolkit.compare.budget import RESCORE_FACTOR
        from poolkit.compare.retrieval import DEPTH

        out.append(
            f"+rescore: the {RESCORE_FACTOR * DEPTH} nearest documents by Hamming distance "
            "re-ranked by the float query's dot product with their bits as ±1 (documents "
            "stored as the row's recipe; queries embedded without /binary)."
        )
    timed = [r for r in ranked if r.search_ms is not None]
    if timed and not any(r.search_growth for r in ranked):  # else: the search ms column
        out.append(_Fact(
            "search per query (exact, this run): "
            + "; ".join(f"{r.label} {r.search_ms:.3f} ms" for r in timed)
            + "."
        ))  # fmt: skip
    return out


def _hybrid_footer(ranked: Sequence[Result]) -> list[str]:
    """Lines on hybrid rows (:mod:`poolkit.compare.hybrid`): how each kind fuses."""
    hybrids = [r.recipe for r in ranked if r.recipe.level == "hybrid"]
    if not hybrids:
        return []
    from poolkit.compare.fusion import DEPTH, RRF_K

    out = []
    if any(h.method == "rrf" for h in hybrids):
        out.append(
            f"rrf(A,B): reciprocal rank fusion of rows A and B, each document scored "
            f"sum 1/(k + its rank in each row), k = {RRF_K}, over each row's top {DEPTH} "
            "(rrf(A,B,k=K,depth=D) when changed; a +rescore or chunked row: its top 100)."
        )
    if any(h.method == "fuse" for h in hybrids):
        out.append(
            f"fuse(A,B,W): W x A + (1 - W) x B of each row's scores normalised over its top "
            f"{DEPTH} per query (min-max; norm=z: z-scores), a document missing from a "
            "row's list taking that row's lowest value."
        )
    out.append("hybrid rows: scored, resampled and paired like every row; their cost is the "
               "sum of their two rows'; their commands are both rows'.")  # fmt: skip
    return out


def _cost_footer(ranked: Sequence[Result]) -> list[str]:
    """Lines on the cost columns (:mod:`poolkit.compare.cost`): what each holds, and how
    each row kind's search grows with the corpus."""
    priced = [r for r in ranked if r.search_growth is not None]
    if not priced:
        return []
    out = [
        "bytes/doc: what an index stores per document (dense: dims x bits/8 x vectors per "
        "document; sparse and BM25: mean non-zeros x (4-byte index + 4-byte value); MaxSim: "
        "tokens x dims x bytes); index 1M|100M: bytes/doc x 1 million | 100 million "
        "documents (ids and index structures left out); query ms: the whole cost of a query, "
        "encoding it (BM25: tokenising) plus the exact search over this corpus, both "
        f"measured in this run (the search: {SEARCH_TIMING}; to each row's top 100; --json "
        "keeps the two parts); a hybrid row: the sums of its two rows' (their searches to "
        "the depth it fuses)."
    ]
    if any(r.flops is not None for r in ranked):
        out.append("bytes/doc f16: a sparse row's bytes/doc with 2-byte (float16) values.")
    growth = dict.fromkeys(r.search_growth for r in priced if r.recipe.level != "hybrid")
    by_kind = {g: [r.label for r in priced if r.search_growth == g] for g in growth}
    out.append(
        "search grows with the corpus (N documents): "
        + "; ".join(f"{', '.join(names)}: {g}" for g, names in by_kind.items())
        + "."
    )
    return out


_DOCUMENT_KINDS = {
    "window": "\u00b7 window: each document whole, through overlapping windows, pooled over "
    "all its tokens (one vector per document)",
    "naive": "\u00b7 naive tokens:N: each document cut into chunks of N of the model's tokens, "
    "each chunk's text embedded alone",
    "late": "\u00b7 late tokens:N: the same chunks pooled from the whole document's contextual "
    "token vectors (one pass of the document, windows past the limit)",
}


def _document_footer(ranked: Sequence[Result]) -> list[str]:
    """Lines on document rows (``--chunk-tokens``): what each representation is, and how a
    chunked document is scored."""
    kinds = {r.documents.split()[0] for r in ranked if r.documents}
    if not kinds:
        return []
    # No window row only when the strategy rows already run windows (--long-text window).
    what = [
        "rows without \u00b7: each document one text, cut at the model's max length"
        if "window" in kinds
        else "rows without \u00b7: each document one text, whole through windows (--long-text "
        "window)",
        *(text for kind, text in _DOCUMENT_KINDS.items() if kind in kinds),
    ]
    out = ["documents: " + "; ".join(what) + "."]
    stored = [r for r in ranked if r.documents and r.vectors_per_document is not None]
    if stored:  # what an index of each row holds: its size, beside its score
        out.append(_Fact(
            "vectors stored per document (mean over the corpus; rows without \u00b7: 1): "
            + "; ".join(f"{r.documents} {r.vectors_per_document:.1f}" for r in stored)
            + "."
        ))  # fmt: skip
    if kinds & {"naive", "late"}:
        out.append(
            "chunked documents: a document's score for a query is its best chunk's (max "
            "cosine over its chunks); queries are embedded whole, as in every row; vs *: "
            "paired with the intended row."
        )
    return out


def bootstrap_info(task: str, resamples: int, seed: int, units: int) -> dict:
    """The ``bootstrap`` record of the JSON file and the table footer."""
    from poolkit.compare.bootstrap import LEVEL

    return {
        "resamples": resamples, "seed": seed, "level": LEVEL, "unit": UNITS[task],
        "units": units, "interval": "percentile",
        "test": "paired bootstrap: significant when the percentile interval of the "
        "per-resample difference to the intended row excludes 0",
    }  # fmt: skip


def _paired_json(p: Paired | None, metric: str) -> dict | None:
    if p is None:
        return None
    return {"metric": metric, "value": p.difference, "ci": list(p.ci)}


def to_json(
    task: str,
    model: str,
    results: Sequence[Result],
    bootstrap: dict | None = None,
    embed_command: Callable[[Result], str] | None = None,
) -> dict:
    """``{"task", "model", "metric", "bootstrap", "results": [...]}``, results best first.

    Each result: ``model`` (as ``--model`` names it), ``recipe`` (the row's name, as
    ``poolkit embed --recipe`` takes it; a ``rescore`` row's: its documents' recipe),
    ``strategy``, ``layers``, every metric, ``intended``, ``ci``, ``significant`` and
    ``difference`` (vs the intended row; null where none), ``vs_best`` (the main metric
    minus the top row's, paired; null for it and without intervals), ``members``,
    ``tied``; then,
    where some row has them, the fields of a quantised run (``backend``, ``quantize``,
    ``vs_fp32``, ``speedup``, ``encode_seconds``), of budget rows (``dims``, ``precision``,
    ``bytes_per_vector``, ``rescore``, ``vs_float32``, ``calibration``, ``ranges``,
    ``search_ms_per_query``), of sparse rows (``active_dims_*``, ``flops``,
    ``bytes_per_document*``), the frontier, the cost (:func:`_cost_json`), of document rows
    (``documents``, ``vectors_per_document``) and ``embed_command`` when ``embed_command``
    is given.
    """
    metric = MAIN_METRIC[task]
    ranked = rank(results, metric)
    quantized = any(r.quantize for r in ranked)
    budget = any(r.bytes_per_vector is not None for r in ranked)
    chunked = any(r.documents for r in ranked)
    sparse = any(r.flops is not None for r in ranked)
    front = any(r.frontier_bytes is not None for r in ranked)
    priced = any(r.search_growth is not None for r in ranked)
    rows = []
    for r, tie in zip(ranked, tied(ranked, metric), strict=True):
        across = bool(getattr(r.recipe, "models", ()))  # a hybrid of two models' rows
        row = {
            "model": None if across else r.model or model,
            "recipe": str(r.recipe),
            "strategy": r.strategy,
            "layers": layer_name(r.recipe.layers),
            **{n: r.metrics[n] for n in METRICS[task]},
            "intended": r.intended,
            "ci": {n: list(v) for n, v in r.ci.items()} if r.ci else None,
            "significant": r.vs_intended.significant if r.vs_intended else None,
            "difference": _paired_json(r.vs_intended, metric),
            "vs_best": _paired_json(r.vs_best, metric),
            "members": [m.strategy for m in r.members or (r.recipe,)],
            "tied": tie,
        }
        if quantized:
            row.update(
                backend=r.backend, quantize=r.quantize,
                vs_fp32=_paired_json(r.vs_fp32, metric), speedup=r.speedup,
                encode_seconds=r.seconds,
            )  # fmt: skip
        if budget:
            row.update(
                dims=r.dims, precision=r.recipe.precision or "float32",
                bytes_per_vector=r.bytes_per_vector, rescore=r.rescore,
                vs_float32=None if r.quantize else _paired_json(r.vs_fp32, metric),
                calibration=r.calibration,
            )  # fmt: skip
            if r.ranges is not None:  # what `poolkit embed --ranges THIS.json` reuses
                row["ranges"] = r.ranges.to_json()
            if r.fit is not None:  # what `poolkit embed --fit FILE` reads
                row["fit"] = {"transform": r.recipe.transform, "on": r.fit,
                              "file": r.fit_file, "seconds": r.fit_seconds}  # fmt: skip
            if task == "retrieval":
                row["search_ms_per_query"] = r.search_ms
        if sparse:
            row.update(active_dims_query=r.active_dims_query, flops=r.flops,
                       active_dims_document=r.active_dims_document,
                       bytes_per_document=r.bytes_per_document,
                       bytes_per_document_f16=r.bytes_per_document_f16)  # fmt: skip
        if front:
            row.update(frontier_bytes=bool(r.frontier_bytes),
                       frontier_query=bool(r.frontier_query))  # fmt: skip
        if priced:
            row.update(_cost_json(r))
        if chunked:
            row["documents"] = r.documents
            row["vectors_per_document"] = r.vectors_per_document
        if embed_command is not None:
            row["embed_command"] = embed_command(r)
        rows.append(row)
    return {"task": task, "model": model, "metric": metric, "bootstrap": bootstrap,
            "results": rows}  # fmt: skip


def _cost_json(r: Result) -> dict[str, Any]:
    """A row's cost fields of the JSON file (``fused_search_ms``: the row's search to the
    depth a hybrid that fuses it searches, else ``search_ms``); a hybrid row's also
    ``sides`` (its two rows' names) and ``fusion`` (method, k, depth, weight, norm)."""
    from poolkit.compare.cost import SIZES, index_bytes

    sizes = index_bytes(r.bytes_per_document)
    out: dict[str, Any] = {
        "bytes_per_document": r.bytes_per_document,
        "index_bytes": None if sizes is None else dict(zip(map(str, SIZES), sizes, strict=True)),
        "query_ms": r.query_ms,  # the whole query cost: the two parts below
        "encode_ms": r.encode_ms,
        "search_ms": r.search_ms,
        # Where a hybrid fuses the row: its search to the depth fused (the hybrid's sum).
        "fused_search_ms": r.search_ms if r.fused_search_ms is None else r.fused_search_ms,
        "search_growth": r.search_growth,
    }
    h = r.recipe
    if h.level == "hybrid":
        out["sides"] = list(h.parts)
        if h.models:  # across models: each side's --model, as given
            out["side_models"] = list(h.models)
        out["fusion"] = {"method": h.method, "k": h.k if h.method == "rrf" else None,
                         "depth": h.depth, "weight": h.weight if h.method == "fuse" else None,
                         "norm": h.norm if h.method == "fuse" else None}  # fmt: skip
    return out


def write_json(path: Path, document: dict) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically."""

    data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    atomic_write(Path(path), lambda f: f.write(data), size=len(data))


def write_plot(path: Path, task: str, model: str, results: Sequence[Result]) -> None:
    """A horizontal bar chart (PNG) of the main metric per candidate, best on top.

    The intended pooling is drawn in another colour; each bar carries its value.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    metric = MAIN_METRIC[task]
    ranked = rank(results, metric)[::-1]  # barh draws bottom-up; best ends on top
    values = [r.metrics[metric] for r in ranked]
    labels = [r.label + ("  (intended)" if r.intended else "") for r in ranked]
    colors = ["#d95f02" if r.intended else "#1b9e77" for r in ranked]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * len(ranked)), dpi=120)
    try:
        bars = ax.barh(range(len(ranked)), values, color=colors)
        ax.set_yticks(range(len(ranked)), labels)
        ax.bar_label(bars, labels=[f"{v:.4f}" for v in values], padding=3, fontsize=8)
        low = min(0.0, *values)
        high = max(values)
        # Start the axis near the worst score so small differences stay visible.
        start = max(low, min(values) - 0.15 * (high - min(values) + 1e-9) - 0.02)
        ax.set_xlim(start, high + 0.12 * (high - start + 1e-9))
        ax.set_ylim(-0.6, len(ranked) - 0.4)
        ax.set_xlabel(f"{metric} (fraction)")
        ax.set_title(f"poolkit compare --task {task}\n{model}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        atomic_write(Path(path), lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
