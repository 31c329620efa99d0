"""Rows of ``compare`` that run through their family's plan (:mod:`poolkit.families`), not
the dense rows' shared pass: sparse recipes (``splade``, :mod:`poolkit.sparse`, retrieval
only), scored by the exact dot product of their sparse vectors; the lexical baseline BM25
(``bm25``, ``bm25s`` with its defaults: ``method="lucene"``, ``k1=1.5``, ``b=0.75``, texts
tokenized with ``stopwords="en"``; retrieval only); and the recipes of a family another
package registers whose outputs are dense vectors (``kind`` ``"dense"``), scored as dense
rows are: cosine for ``sts``, probes for ``classification``, exact cosine search for
``retrieval``. Documents are joined as the dense rows join them; ranking, tie rule and
metrics are the dense rows' (:func:`poolkit.compare.search.top_k_by`,
:func:`~poolkit.compare.retrieval.query_metrics`), so every row gets the same intervals and
paired differences. Per sparse row: :func:`sparsity_facts`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.bm25 import BM25, parse_bm25
from poolkit.compare.timing import model_time, timed_depths
from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = [
    "BM25",
    "PLAN_TASKS",
    "check_extra_rows",
    "embed_rows",
    "parse_bm25",
    "score_extra_rows",
    "sparsity_facts",
    "split_extra",
]


PLAN_TASKS = ("sts", "classification", "retrieval")  # another family's dense rows


def split_extra(strategies: Sequence[Any] | None, task: str) -> tuple[list[Any] | None, list[Any]]:
    """``(dense names, rows run through their family's plan)`` of ``strategies``: sparse and
    BM25 rows, and another package's family's rows; for ``None`` (the defaults) the dense
    defaults and, for retrieval, a BM25 row. Outside retrieval a sparse or BM25 name is
    refused, and another family's rows outside :data:`PLAN_TASKS` or not dense."""
    from poolkit.recipe import Recipe

    if strategies is None:
        return None, [BM25()] if task == "retrieval" else []
    dense: list[Any] = []
    extra: list[Any] = []
    for s in strategies:
        bm = parse_bm25(s)
        r = bm if bm is not None else s if isinstance(s, Recipe) else None
        if r is None and isinstance(s, str) and s.strip().split("/")[0].strip().lower() in _SPARSE:
            r = Recipe.parse(s)
        if r is None and isinstance(s, str):
            r = _other_family(s)
        if r is not None and _planned(r):
            _check_task(r, task)
            if r not in extra:
                extra.append(r)
        else:
            dense.append(s)
    return dense, extra


def _planned(r: Any) -> bool:
    """Whether row ``r`` runs through its family's plan here: BM25, a sparse recipe, or a
    recipe of another package's family. Multi-vector recipes go with the dense ones
    (retrieval.score gives them MaxSim rows)."""
    from poolkit.families import is_builtin

    return (isinstance(r, BM25) or r.kind not in ("dense", "multivector")
            or not is_builtin(r.family))  # fmt: skip


def _other_family(name: str) -> Any:
    """``name`` parsed where its level prefix (``LEVEL:...``) is one of another package's
    family, else None: a name of poolkit's own levels is left to the dense path, which
    parses it once, at the task's level (or refuses it with its own message)."""
    from poolkit.families import is_builtin
    from poolkit.levels import level
    from poolkit.recipe import Recipe

    prefix, sep, _ = name.partition(":")
    spec = level(prefix.strip().lower()) if sep else None
    return None if spec is None or is_builtin(spec.family) else Recipe.parse(name)


def _check_task(r: Any, task: str) -> None:
    from poolkit.families import is_builtin

    if isinstance(r, BM25) or is_builtin(r.family) or r.kind != "dense":
        if task != "retrieval":
            value_error("recipes", f"dense recipes for --task {task}", str(r),
                        "Sparse and BM25 rows are compared on --task retrieval.")  # fmt: skip
    elif task not in PLAN_TASKS:
        value_error("recipes", f"recipes of poolkit's own families for --task {task}", str(r),
                    f"A {r.family} row (another package's family) is compared on --task "
                    f"{', '.join(PLAN_TASKS)}.")  # fmt: skip


_SPARSE = frozenset(SPARSE_STRATEGIES) | {f"sparse:{n}" for n in SPARSE_STRATEGIES}


def sparsity_facts(queries: Any, documents: Any) -> dict[str, float]:
    """Mean active dimensions of ``queries`` and ``documents`` (CSR ``(Q, V)``, ``(N, V)``),
    FLOPS (as sentence-transformers' ``SparseInformationRetrievalEvaluator``: the dot product
    of the fraction of queries and of documents in which each term is active) and bytes per
    stored document (int32 index and float32 or float16 weight per active term)."""
    q_active = np.diff(queries.indptr)
    d_active = np.diff(documents.indptr)
    width = queries.shape[1]
    q_share = np.bincount(queries.indices, minlength=width) / max(queries.shape[0], 1)
    d_share = np.bincount(documents.indices, minlength=width) / max(documents.shape[0], 1)
    mean_d = float(d_active.mean()) if len(d_active) else 0.0
    return {
        "active_dims_query": float(q_active.mean()) if len(q_active) else 0.0,
        "active_dims_document": mean_d,
        "flops": float(q_share @ d_share),
        "bytes_per_document": mean_d * (4 + 4),
        "bytes_per_document_f16": mean_d * (4 + 2),
    }


def sparse_ranked(
    queries: Any, documents: Any, k: int, ties: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` documents per query by exact sparse dot product (ties as the dense rows'):
    indices and scores ``(Q, k)``."""
    from poolkit.compare.search import top_k_by

    def scores(q0: int, q1: int, d0: int, d1: int) -> np.ndarray:
        block = queries[q0:q1] @ documents[d0:d1].T
        return np.asarray(block.toarray(), dtype=np.float32)

    return top_k_by(scores, queries.shape[0], documents.shape[0], k, ties, doc_block=4096)


def bm25_ranked(
    queries: Sequence[str],
    documents: Sequence[str],
    row: BM25,
    k: int,
    ties: np.ndarray,
    deep: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Top-``max(k, deep)`` documents per query by ``bm25s``' scores (ties as the dense
    rows'): indices and scores, and the row's cost (:mod:`poolkit.compare.cost`):
    ``bytes_per_document`` (the index's stored (document, term) scores per document, each
    a value and a document index), ``query_ms`` (tokenising) and ``search_ms`` per query
    (top ``k``; ``fused_search_ms``: top ``max(k, deep)``)."""
    import bm25s

    from poolkit.compare.search import top_k_by

    index = bm25s.BM25(k1=row.k1, b=row.b)
    index.index(bm25s.tokenize(list(documents), stopwords="en", show_progress=False),
                show_progress=False)  # fmt: skip
    began = time.perf_counter()
    tokens = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
    tokenized = time.perf_counter()
    n = len(documents)

    def search(k: int) -> tuple[np.ndarray, np.ndarray]:
        matrix = np.stack([index.get_scores(list(t)) if t else np.zeros(n, np.float32)
                           for t in tokens]) if tokens else np.zeros((0, n), np.float32)  # fmt: skip
        return top_k_by(lambda q0, q1, d0, d1: matrix[q0:q1, d0:d1], len(queries), n, k, ties)

    (ranked, scores), own, fused = timed_depths(search, k, deep)
    per_query = 1000 / max(len(queries), 1)
    stored = index.scores
    entry = stored["data"].itemsize + stored["indices"].itemsize
    cost = {
        "bytes_per_document": float(stored["data"].size * entry / max(n, 1)),
        "query_ms": (tokenized - began) * per_query,
        "search_ms": own * per_query,
        "fused_search_ms": fused * per_query,
    }
    return ranked, scores, cost


def check_extra_rows(encoder: Any, rows: Sequence[Any]) -> None:
    """Refuse, before any forward pass, a row of ``rows`` that ``encoder``'s model cannot
    run (a sparse row without an MLM head: one line naming the row): each family's plan
    is made, which checks its request. BM25 rows need no model."""
    from poolkit.families import family_plan

    for named in _by_family(rows).values():
        family_plan(encoder, named)


def _by_family(rows: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The model rows of ``rows`` (not BM25), by family: ``{family: {name: recipe}}``."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if not isinstance(r, BM25):
            out.setdefault(r.family, {})[str(r)] = r
    return out


def embed_rows(
    encoder: Any, texts: Sequence[str], rows: Sequence[Any], settings: Any,
    prompt_name: str | None = None,
) -> dict[Any, np.ndarray]:  # fmt: skip
    """Each dense row of another family (:func:`split_extra`) over ``texts``: float32 ``(N,
    D_r)`` by row, its family's plan run once per family."""
    out: dict[Any, np.ndarray] = {}
    for named in _by_family(rows).values():
        vectors = _embed(encoder, texts, named, settings, prompt_name)
        out.update({r: np.asarray(vectors[n], np.float32) for n, r in named.items()})
    return out


def score_extra_rows(
    encoder: Any, data: Any, rows: Sequence[Any], settings: Any
) -> tuple[dict[Any, Any], dict[Any, dict[str, float]]]:
    """Each sparse or BM25 row of ``rows`` on retrieval ``data``: ``({row: QueryEval},
    {row: facts})`` (facts: :func:`sparsity_facts`, sparse rows only). Sparse recipes share
    one forward pass per side; queries get ``settings.prompt_name``, documents
    ``settings.document_prompt_name``, as the dense rows do; an inference-free model's
    queries go through its query route (:mod:`poolkit.sparse.static`)."""
    from poolkit.compare.evaluation import QueryEval
    from poolkit.compare.fusion import keep_depth, record
    from poolkit.compare.retrieval import DEPTH, query_metrics
    from poolkit.compare.search import id_order, top_k

    ties = id_order(data.doc_ids)
    out: dict[Any, Any] = {}
    facts: dict[Any, dict[str, float]] = {}
    costs = getattr(settings, "costs", {})
    per_query = 1000 / max(len(data.queries), 1)
    for named in _by_family(rows).values():  # one pass a side for each family's rows
        q_vecs, seconds = model_time(encoder, lambda named=named: _embed(
            encoder, data.queries, named, settings,
            query_prompt_name(settings.prompt_name, encoder.info)))  # fmt: skip
        query_ms = seconds * per_query
        d_vecs = _embed(encoder, data.documents, named, settings, settings.document_prompt_name)
        for name, r in named.items():
            q, d = q_vecs[name], d_vecs[name]
            sparse = hasattr(d, "tocsr")
            search = (partial(sparse_ranked, q, d, ties=ties) if sparse else
                      partial(top_k, np.asarray(q, np.float32), np.asarray(d, np.float32),
                              id_order=ties))  # fmt: skip
            (ranked, scores), own, fused = timed_depths(
                search, DEPTH, keep_depth(settings, (r, None), DEPTH)
            )
            costs[(r, None)] = {"query_ms": query_ms, "search_ms": own * per_query,
                                "fused_search_ms": fused * per_query}  # fmt: skip
            record(settings, (r, None), ranked, scores)
            out[r] = QueryEval(query_metrics(ranked, data.qrels, len(data.documents)))
            width = int(d.shape[1])
            facts[r] = (sparsity_facts(q, d) if sparse else
                        {"dims": width, "bytes_per_vector": width * 4})  # fmt: skip
    for r in rows:
        if isinstance(r, BM25):
            ranked, scores, costs[(r, None)] = bm25_ranked(
                data.queries, data.documents, r, DEPTH, ties, keep_depth(settings, (r, None), DEPTH)
            )
            record(settings, (r, None), ranked, scores)
            out[r] = QueryEval(query_metrics(ranked, data.qrels, len(data.documents)))
    return out, facts


def query_prompt_name(prompt_name: str | None, info: Any) -> str | None:
    """The prompt name a sparse row's queries take: the one asked for, else ``"query"``
    where the model routes its queries apart (an inference-free model: that name picks the
    route, as ``poolkit embed --prompt-name query`` does), else none."""
    if prompt_name is None and getattr(info, "query_route", None) is not None:
        return "query"
    return prompt_name


def _embed(encoder: Any, texts: Sequence[str], named: dict[str, Any], settings: Any,
           prompt_name: str | None) -> dict[str, Any]:  # fmt: skip
    """The family's plan run over ``texts``: the side follows ``prompt_name``."""
    from poolkit.families import family_plan

    plan = family_plan(encoder, named, prompt_name=prompt_name)
    vectors, stats = plan.run(encoder, list(texts), long_text=settings.long_text)
    if stats.num_truncated:
        note = (f"{', '.join(named)}: {stats.num_truncated} of {len(texts)} texts truncated at "
                f"{encoder.max_length} tokens.")  # fmt: skip
        if note not in settings.notes:
            settings.notes.append(note)
    return vectors
