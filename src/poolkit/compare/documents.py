"""Document rows of `poolkit compare --task retrieval` (``--chunk-tokens N ...``): the
intended recipe ``R`` with its documents represented otherwise than truncated, so that the
table shows whether chunking helps on the user's corpus.

``R · window`` (documents whole through windows; left out with ``--long-text window``),
``R · naive tokens:N`` (:func:`poolkit.chunking.chunk_documents`, each chunk's text
embedded alone) and ``R · late tokens:N`` (the same chunks pooled from the whole
document's token vectors, every size in one pass; left out for ``cls`` and ``last``), as
:func:`document_vectors` makes them. A chunked document's score for a query is its best
chunk's cosine; queries are embedded whole; ranking, ties and metrics are
:mod:`poolkit.compare.retrieval`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from poolkit.compare.embedding import embed_sequences, progress
from poolkit.compare.search import top_k_by, unit_rows
from poolkit.compare.timing import timed_search
from poolkit.errors import InputError
from poolkit.recipe import Recipe

__all__ = [
    "DOCUMENT_TASKS",
    "ChunkError",
    "check_sizes",
    "chunk_label",
    "document_rows",
    "document_vectors",
    "labels",
    "max_chunk_top_k",
    "suggested_sizes",
]

DOCUMENT_TASKS = ("retrieval",)
WINDOW = "window"
# Chunk vectors scored per block of documents (memory: query_block x these chunks).
_CHUNK_BLOCK = 32768


class ChunkError(InputError):
    """A chunk size the model cannot take (0, or more tokens than a sequence holds)."""


def chunk_label(kind: str, size: int) -> str:
    """A document row's label: ``"naive tokens:128"``, ``"late tokens:128"``."""
    return f"{kind} tokens:{size}"


def late_ok(recipe: Recipe) -> bool:
    """Whether ``recipe`` can pool a late chunk (no strategy naming one sequence token)."""
    from poolkit.chunking import positional_parts

    return not positional_parts(recipe)


def labels(sizes: Sequence[int], window: bool = True, late: bool = True) -> list[str]:
    """Document row labels in table order: window, then per size naive and late."""
    out = [WINDOW] if window else []
    for n in sizes:
        out.append(chunk_label("naive", n))
        if late:
            out.append(chunk_label("late", n))
    return out


def suggested_sizes(room: int) -> str:
    """Chunk sizes to suggest for a model of ``room`` text tokens: 64 128 256, the
    largest replaced by ``room`` where a sequence holds fewer (all-MiniLM-L6-v2: 254)."""
    sizes = [k for k in (64, 128, 256) if k <= room]
    if room < 256:
        sizes.append(room)
    return " ".join(str(k) for k in sizes)


def check_sizes(encoder: Any, sizes: Sequence[int]) -> tuple[int, ...]:
    """``sizes`` without repeats, each from 1 to the model's text room (max length less
    the special tokens); raises :class:`ChunkError` (before any forward pass)."""
    from poolkit.chunking import check_size

    out = tuple(dict.fromkeys(int(n) for n in sizes))
    for n in out:
        try:
            check_size(encoder, n, "chunk_tokens")
        except InputError as e:  # the same check, with the sizes compare suggests
            raise ChunkError(
                arg=e.arg,
                expected=e.expected,
                got=e.got,
                fix=f"e.g. {suggested_sizes(encoder.text_room)}.",
            ) from None
    return out


def max_chunk_top_k(
    queries: np.ndarray,
    chunks: np.ndarray,
    counts: np.ndarray,
    depth: int,
    ties: np.ndarray,
) -> np.ndarray:
    """Exact top ``depth`` documents per query, a document scored by the best cosine over
    its chunks: ``chunks`` ``(sum counts, D)`` in document order, ``counts`` ``(N,)``
    chunks per document (each >= 1). Ties: larger ``ties`` first, as in
    :func:`~poolkit.compare.search.top_k`. Returns int64 ``(Q, min(depth, N))``."""
    q_unit, c_unit = unit_rows(queries), unit_rows(chunks)
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    n_docs = len(counts)
    per_doc = max(1.0, len(c_unit) / max(n_docs, 1))
    doc_block = max(1, int(_CHUNK_BLOCK / per_doc))

    def scores_of(q0: int, q1: int, d0: int, d1: int) -> np.ndarray:
        c0, c1 = starts[d0], starts[d1]
        sims = q_unit[q0:q1] @ c_unit[c0:c1].T
        return np.maximum.reduceat(sims, starts[d0:d1] - c0, axis=1)

    ranked, _ = top_k_by(scores_of, len(q_unit), n_docs, depth, ties, doc_block=doc_block)
    return ranked


def document_rows(
    encoder: Any,
    documents: list[str],
    recipe: Recipe,
    sizes: Sequence[int],
    queries: np.ndarray,
    settings: Any,
    depth: int,
    ties: np.ndarray,
    source: str = "",
) -> dict[str, np.ndarray]:
    """Every document row of ``recipe``: label -> ranked ``(Q, depth)`` document indices
    for the float32 ``queries`` (the intended row's query vectors), each document scored by
    its best chunk (:func:`max_chunk_top_k`; the window row: its one vector). Each row's
    vectors stored per document, on average, go to ``settings.budget_facts[(recipe,
    label)]["vectors_per_document"]``."""
    out = {}
    facts = getattr(settings, "budget_facts", None)
    for label, (vectors, counts) in document_vectors(
        encoder, documents, recipe, sizes, settings, source
    ).items():
        out[label], seconds = timed_search(max_chunk_top_k, queries, vectors, counts, depth, ties)
        if facts is not None:
            facts[(recipe, label)] = {"vectors_per_document": float(np.mean(counts)),
                                      "search_ms": seconds * 1000 / max(len(queries), 1)}  # fmt: skip
    return out


def document_vectors(
    encoder: Any,
    documents: list[str],
    recipe: Recipe,
    sizes: Sequence[int],
    settings: Any,
    source: str = "",
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every document row's vectors: label -> (float32 ``(sum C_i, D)`` in document then
    chunk order, chunks per document ``(N,)``).

    ``settings`` gives the documents' prompt (``document_prompt_name``, else the model's
    default, as the strategy rows' documents get it), ``long_text`` (``"window"``:
    no window row, the strategy rows already are) and ``notes`` (chunk texts truncated,
    late rows left out). Window: one pass of the documents; naive: one pass over each
    size's chunk texts; late: one pass of the documents for every size together."""
    from poolkit.chunkers import Chunker
    from poolkit.chunking import chunk_documents, late_chunk_vectors, naive_chunk_vectors
    from poolkit.plan import make_plan

    name = str(recipe)
    # The prompt the strategy rows' documents got (retrieval.score): the one named for
    # documents, else the model's default (None), never the queries'.
    prompt_name = settings.document_prompt_name
    # One resolution for every chunk row: naive at each size, late.
    plan = make_plan(encoder, {name: recipe}, prompt_name=prompt_name, pipeline="fit",
                     calibration={})  # fmt: skip
    n_docs = len(documents)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    where = source or "documents"
    if settings.long_text != "window":
        vectors, _ = embed_sequences(
            encoder, documents, [recipe], settings, f"embedding {where} (windows)",
            prompt_name, long_text="window",
        )  # fmt: skip
        out[WINDOW] = (vectors[recipe], np.ones(n_docs, np.int64))
    else:
        settings.notes.append(
            "--long-text window: the strategy rows already embed each document whole "
            "through windows, so there is no separate window row."
        )
    spans = {n: chunk_documents(documents, Chunker("tokens", size=n), encoder) for n in sizes}
    counts = {n: np.fromiter((len(s) for s in spans[n]), np.int64, count=n_docs) for n in sizes}
    for n in sizes:
        with progress(settings, f"naive chunks tokens:{n}", n_docs, "doc") as bar:
            flat, stats = naive_chunk_vectors(documents, spans[n], encoder, plan,
                                              progress=bar.update)  # fmt: skip
        if stats.num_truncated:
            settings.notes.append(
                f"naive tokens:{n}: a chunk of {stats.num_truncated} of {n_docs} documents "
                f"truncated at {encoder.max_length} tokens (its text alone tokenizes longer)."
            )
        out[chunk_label("naive", n)] = (flat[name], counts[n])
    if not late_ok(recipe):
        settings.notes.append(
            f"late chunks: {name} names one token of the whole sequence, which a late chunk "
            "does not have; no late rows (use a mean or max recipe)."
        )
        return out
    # One pass of the documents for every size: each document's chunks of all sizes, one
    # size after the other, pooled from the same contextual token vectors.
    both = [np.concatenate([spans[n][i] for n in sizes]) for i in range(n_docs)]
    with progress(settings, "late chunks", n_docs, "doc") as bar:
        flat, _ = late_chunk_vectors(documents, both, encoder, plan, progress=bar.update)
    starts = np.concatenate([[0], np.cumsum([len(s) for s in both])])[:-1]
    offset = np.zeros(n_docs, np.int64)
    for n in sizes:
        first = starts + offset  # this size's first chunk of each document
        rows = np.concatenate([np.arange(a, a + c) for a, c in zip(first, counts[n], strict=True)])
        offset += counts[n]
        out[chunk_label("late", n)] = (flat[name][rows], counts[n])
    return out
