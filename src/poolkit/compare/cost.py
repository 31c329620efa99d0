"""The cost of a retrieval row beside its quality: bytes stored per document, the index
size at 1 and 100 million documents, the query's encoding time and the search time per
query, both measured in the run, and how the search grows with the corpus.

Bytes per document (what an index of the row stores; ids and index overhead left out):

- a dense row: ``dims x bits / 8`` per vector (float32 4 bytes a dimension, float16 2,
  int8/uint8 1, binary 1/8), times the vectors stored per document (1; a chunked
  documents row: its mean chunks per document);
- a sparse row and BM25: the mean non-zero entries per document x (4-byte index +
  4-byte value), measured on this corpus (BM25: ``bm25s``' stored (document, term)
  scores);
- a MaxSim row: the mean tokens kept per document x dims x bytes per value; MUVERA: its
  one vector (``+rescore`` adds the tokens);
- a hybrid row: the sum of its two rows.

``encode_ms``: per query, the time to turn the queries into what the row searches with,
measured on this run's queries (dense, MaxSim, sparse rows: the model's forward pass and
pooling; BM25: tokenisation), timed once; ``search_ms``: per query, the exact search over
this corpus (top-k included), timed as :data:`~poolkit.compare.timing.SEARCH_TIMING` says
(:func:`~poolkit.compare.timing.timed_search`), to the row's own cut-off (top 100). A hybrid
row's times are its rows' sums, each row's search to the depth the hybrid fuses (top 1000;
fusion itself left out: it handles 2 x depth candidates a query, whatever the corpus).
A row's whole query cost (``query_ms`` of a result) is ``encode_ms + search_ms``.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from poolkit.compare.timing import SEARCH_TIMING

__all__ = [
    "GROWTH",
    "SIZES",
    "growth",
    "hardware",
    "human_bytes",
    "hybrid_cost",
    "index_bytes",
    "priced",
]

SIZES = (1_000_000, 100_000_000)

# How the exact search of each row kind grows with N documents (per query).
GROWTH = {
    "dense": "linear in N: N x dims multiply-adds",
    "bits": "linear in N: N x dims/8 bytes of XOR and popcount",
    "rescore": "linear in N (Hamming) plus 400 x dims for the re-rank",
    "sparse": "linear in N: a dot product with every document (an inverted index: the "
    "postings of the query's terms, FLOPS per document)",
    "lexical": "linear in the postings of the query's terms (at most N per term)",
    "multivector": "linear in N: N x query tokens x document tokens x dims",
    "muvera": "linear in N: N x MUVERA dims (+rescore: plus 100 MaxSim scores)",
    "chunks": "linear in N x chunks per document: N x chunks x dims",
    "hybrid": "the sum of its two rows'",
}


def growth(recipe: Any, rescore: bool = False, documents: str | None = None) -> str:
    """The :data:`GROWTH` text of a row."""
    if recipe.level == "hybrid":
        return GROWTH["hybrid"]
    if recipe.level == "lexical" or recipe.kind == "lexical":
        return GROWTH["lexical"]
    if recipe.level == "sparse" or recipe.kind == "sparse":
        return GROWTH["sparse"]
    if recipe.level == "multivector":
        return GROWTH["muvera" if recipe.muvera else "multivector"]
    if documents and documents.split()[0] in ("naive", "late"):
        return GROWTH["chunks"]
    if recipe.precision in ("binary", "ubinary"):
        return GROWTH["rescore" if rescore else "bits"]
    return GROWTH["dense"]


def index_bytes(bytes_per_document: float | None) -> list[float] | None:
    """The index size in bytes at each of :data:`SIZES` documents."""
    return None if bytes_per_document is None else [bytes_per_document * n for n in SIZES]


def human_bytes(n: float) -> str:
    """``n`` bytes in decimal units: ``384``, ``1.5K``, ``154M``, ``1.5G``, ``15T``."""
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            v = n / size
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{n:.0f}"


def hardware(encoder: Any) -> dict[str, Any]:
    """Where and how the times were measured: the model, its device, the machine's CPU and
    ``search_timing`` (:data:`~poolkit.compare.timing.SEARCH_TIMING`)."""

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((x.split(":", 1)[1].strip() for x in f if x.startswith("model name")),
                       cpu)  # fmt: skip
    except OSError:
        pass
    return {
        "model": encoder.info.reference,
        "device": str(getattr(encoder, "device", "cpu")),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "search_timing": SEARCH_TIMING,
    }


def _bytes(row: Any, measured: dict[str, Any], widths: dict[Any, int]) -> float | None:
    """Bytes per document of a row that is not a hybrid (see the module docstring)."""
    if row.bytes_per_document is not None:  # sparse: measured non-zeros
        return row.bytes_per_document
    if "bytes_per_document" in measured:  # BM25
        return float(measured["bytes_per_document"])
    if row.documents:  # document rows: the float32 row's vectors, times chunks per document
        width = widths.get(row.recipe)
        if width is None or row.vectors_per_document is None:
            return None
        return float(width * 4 * row.vectors_per_document)
    if row.bytes_per_vector is not None:  # budget rows; MaxSim/MUVERA: per document already
        return float(row.bytes_per_vector)
    width = widths.get(row.recipe)
    return None if width is None else float(width * 4)


def priced(rows: Sequence[Any], settings: Any) -> list[Any]:
    """``rows`` (:class:`~poolkit.compare.summary.Row`) with their cost set:
    ``bytes_per_document``, ``encode_ms``, ``search_ms``, ``search_growth``; a hybrid's the
    sum of its rows' (None where one is unknown). An int8 model's row (``--quantize``)
    stores the float vectors its model gives: its bytes are the float row's, its times
    those measured with that model (``settings.int8_costs``)."""
    facts = getattr(settings, "budget_facts", {})
    tables = {}  # quantised -> (measured costs, widths by recipe)
    for quantized, name in ((False, "costs"), (True, "int8_costs")):
        table = getattr(settings, name, {})
        tables[quantized] = table, {k[0]: v["dims"] for k, v in table.items()
                                    if isinstance(v, dict) and "dims" in v}  # fmt: skip
    out: dict[Any, Any] = {}
    for r in rows:
        if r.recipe.level == "hybrid":
            out[r.key] = r
            continue
        costs, widths = tables[bool(r.quantize)]
        measured = costs.get((r.recipe, None) if r.quantize else r.key, {})
        search, fused = r.search_ms, r.fused_search_ms
        if search is None:
            fact = facts.get(r.key, {})
            search = measured.get("search_ms", fact.get("search_ms"))
            fused = measured.get("fused_search_ms", fact.get("fused_search_ms"))
        out[r.key] = replace(
            r, bytes_per_document=_bytes(r, measured, widths),
            encode_ms=measured.get("query_ms", costs.get("query_ms")), search_ms=search,
            fused_search_ms=fused, search_growth=growth(r.recipe, r.rescore, r.documents),
        )  # fmt: skip
    for r in rows:
        if r.recipe.level == "hybrid":
            out[r.key] = hybrid_cost(r, [out[s] for s in r.recipe.sides])
    return [out[r.key] for r in rows]


def hybrid_cost(row: Any, sides: Sequence[Any]) -> Any:
    """A hybrid ``row`` priced as the sum of its ``sides``' costs (None where one is
    unknown); each side's search is the one to the depth the hybrid fuses."""

    def total(values: Sequence[float | None]) -> float | None:
        return None if any(v is None for v in values) else float(sum(values))

    searched = [s.search_ms if s.fused_search_ms is None else s.fused_search_ms for s in sides]
    return replace(
        row, bytes_per_document=total([s.bytes_per_document for s in sides]),
        encode_ms=total([s.encode_ms for s in sides]), search_ms=total(searched),
        search_growth=growth(row.recipe),
    )  # fmt: skip
