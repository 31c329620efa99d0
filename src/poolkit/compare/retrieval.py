"""``poolkit compare --task retrieval``: read queries, corpus and relevance judgements;
exact cosine top-k search; nDCG@10, MRR@10, Recall@100 and MAP@100 per query.

Two input forms:

- the BEIR layout that MTEB uses: a folder with ``corpus.jsonl`` (``_id``, ``title``,
  ``text``), ``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id``,
  ``corpus-id``, ``score``; a header line is allowed). A document's text is
  ``(title + " " + text).strip()`` when it has a title field, else ``text.strip()``, as MTEB
  joins them. Only queries named in the split's qrels are evaluated.
- a table (``.jsonl``, ``.csv``, ``.tsv``, ``.parquet``) of (query, positive document)
  rows: distinct query texts are the queries, distinct document texts the corpus, each
  row one judgement of relevance 1.

Metrics follow trec_eval (``pytrec_eval``, as MTEB calls it) and MTEB's MRR: a document is
relevant when its judgement is > 0; the gain of nDCG is the judgement itself (log2
discount, ideal ranking from all judgements of the query); MAP@100 divides by all
relevant documents of the query; ranking is by cosine similarity, ties by document id in
decreasing order (trec_eval's order). Every metric is the mean over queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from poolkit.compare.datasets import DataError
from poolkit.compare.fusion import keep_depth, record
from poolkit.compare.search import id_order, top_k
from poolkit.compare.timing import model_time, timed_depths
from poolkit.io.readers import read_records

__all__ = [
    "METRICS",
    "RetrievalData",
    "query_metrics",
    "read_retrieval",
    "score",
]

METRICS = ("ndcg_at_10", "mrr_at_10", "recall_at_100", "map_at_100")
_QRELS_COLUMNS = ("query-id", "corpus-id", "score")
DEPTH = 100  # deepest cut-off of METRICS
_BEIR_FILES = ("corpus.jsonl", "queries.jsonl")


@dataclass(frozen=True)
class RetrievalData:
    """Queries, corpus and judgements.

    ``qrels`` is int64 ``(J, 3)``: rows ``(query index, document index, relevance)``,
    sorted by query then document; every query has a judgement > 0.
    """

    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    documents: list[str]
    qrels: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.queries)


def read_retrieval(
    path: str | Path,
    split: str | None = None,
    query_column: str = "query",
    document_column: str = "document",
    text_column: str = "text",
) -> RetrievalData:
    """Read a BEIR folder (``split``: the qrels file, default ``test`` or the only one;
    ``text_column``: the text field of its corpus and queries) or a (query, document)
    table, by :func:`poolkit.io.readers.read_records`. Raises
    :class:`~poolkit.errors.InputError` (:class:`DataError` for unusable data) naming the
    file and line."""
    path = Path(path)
    if path.is_dir():
        return _read_beir(path, split, text_column)
    if not path.is_file():
        raise DataError(
            where=path, expected="a file or folder", got="there is no such file or folder"
        )
    if split is not None:
        raise DataError(arg="split", expected="given only for a BEIR folder", got=repr(split),
                        fix=f"{path} is a file: drop it.")  # fmt: skip
    return _read_pairs(path, query_column, document_column)


def _jsonl_records(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise DataError(where=path, expected="a BEIR folder's file (corpus.jsonl, queries.jsonl, "
                        "qrels/)", got="it is missing")  # fmt: skip
    return read_records(path, "jsonl")[1]


def _text(rec: dict, name: str, where: str, required: bool = True) -> str:
    value = rec.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DataError(where=where, expected=f"text in {name!r}", got=f"got {value!r}")
    return value


def _ids(path: Path, records: list[tuple[str, dict]]) -> dict[str, int]:
    first: dict[str, str] = {}
    out: dict[str, int] = {}
    for where, rec in records:
        raw = rec.get("_id")
        if isinstance(raw, bool) or not isinstance(raw, str | int) or str(raw) == "":
            raise DataError(where=where, expected="an _id (string)", got=f"got {raw!r}")
        key = str(raw)
        if key in first:
            raise DataError(where=where, expected=f"_id {key!r} once",
                            got=f"it was first at {first[key]}")  # fmt: skip
        first[key] = where
        out[key] = len(out)
    return out


def _read_beir(folder: Path, split: str | None, text_column: str = "text") -> RetrievalData:
    corpus = _jsonl_records(folder / "corpus.jsonl")
    if not corpus:
        raise DataError(
            where=folder / "corpus.jsonl", expected="documents", got="the corpus is empty"
        )
    doc_index = _ids(folder / "corpus.jsonl", corpus)
    documents = []
    for where, rec in corpus:
        text = _text(rec, text_column, where)
        if "title" in rec:  # MTEB's join
            joined = (_text(rec, "title", where) + " " + text).strip()
        else:
            joined = text.strip()
        if not joined:
            raise DataError(
                where=where, expected="a document with a title or text", got="it is empty"
            )
        documents.append(joined)
    query_records = _jsonl_records(folder / "queries.jsonl")
    query_index = _ids(folder / "queries.jsonl", query_records)
    query_texts = []
    for where, rec in query_records:
        text = _text(rec, text_column, where)
        if not text.strip():
            raise DataError(where=where, expected="a query text", got="it is empty")
        query_texts.append(text)
    qrels_path = _qrels_file(folder, split)
    judged: dict[tuple[int, int], str] = {}
    rows: list[tuple[int, int, int]] = []
    first_line: dict[int, str] = {}
    _, records = read_records(qrels_path, "tsv", names=list(_QRELS_COLUMNS))
    for k, (where, rec) in enumerate(records):
        fields = [f.strip() for f in rec.values()]
        if not any(fields) or (k == 0 and fields[0].lower() in ("query-id", "query_id", "qid")):
            continue  # a blank line, or the header
        if len(fields) != 3:
            raise DataError(where=where, expected="3 tab-separated fields "
                            f"({', '.join(_QRELS_COLUMNS)})", got=f"got {len(fields)}")  # fmt: skip
        qid, did, score = fields
        if qid not in query_index:
            raise DataError(where=where, expected="a query-id of queries.jsonl", got=f"got {qid!r}")
        if did not in doc_index:
            raise DataError(where=where, expected="a corpus-id of corpus.jsonl", got=f"got {did!r}")
        try:
            rel = int(score)
        except ValueError:
            raise DataError(where=where, expected="an integer score",
                            got=f"got {score!r}") from None  # fmt: skip
        key = (query_index[qid], doc_index[did])
        if key in judged:
            raise DataError(where=where, expected=f"one judgement of ({qid}, {did})",
                            got=f"it was first at {judged[key]}")  # fmt: skip
        judged[key] = where
        first_line.setdefault(key[0], where)
        rows.append((*key, rel))
    if not rows:
        raise DataError(where=qrels_path, expected="judgements", got="none was found")
    qrels = np.asarray(rows, dtype=np.int64)
    used = np.unique(qrels[:, 0])
    positive = set(qrels[qrels[:, 2] > 0, 0].tolist())
    for q in used.tolist():
        if q not in positive:
            raise DataError(where=first_line[q], expected=f"query "
                            f"{query_records[q][1]['_id']!r} to have a relevant document",
                            got="every score is <= 0", fix="Drop its lines.")  # fmt: skip
    # Keep the judged queries only, renumbered in queries.jsonl order.
    renumber = np.full(len(query_texts), -1, dtype=np.int64)
    renumber[used] = np.arange(len(used))
    qrels[:, 0] = renumber[qrels[:, 0]]
    qrels = qrels[np.lexsort((qrels[:, 1], qrels[:, 0]))]
    ids = list(query_index)
    return RetrievalData(
        [ids[q] for q in used], [query_texts[q] for q in used], list(doc_index), documents,
        qrels, str(folder),
    )  # fmt: skip


def _qrels_file(folder: Path, split: str | None) -> Path:
    qdir = folder / "qrels"
    have = sorted(p.stem for p in qdir.glob("*.tsv")) if qdir.is_dir() else []
    if not have:  # no judgements at all: --split cannot help, the layout can
        raise DataError(
            where=qdir,
            expected="judgements as qrels/SPLIT.tsv (BEIR's layout: corpus.jsonl, "
            "queries.jsonl, qrels/test.tsv with the columns query-id, corpus-id, score)",
            got="the folder does not exist" if not qdir.is_dir() else "it holds no .tsv file",
            fix="Add qrels/test.tsv.",
        )
    if split is not None:
        if split not in have:
            raise DataError(arg="split", expected=f"a split of {qdir}", got=repr(split),
                            fix=f"Its splits: {', '.join(have)}.")  # fmt: skip
        return qdir / f"{split}.tsv"
    if "test" in have:
        return qdir / "test.tsv"
    if len(have) == 1:
        return qdir / f"{have[0]}.tsv"
    raise DataError(where=qdir, expected="qrels/test.tsv or a single qrels file",
                    got=f"found {', '.join(have)}",
                    fix="Choose one with `split`.")  # fmt: skip


def _read_pairs(path: Path, query_column: str, document_column: str) -> RetrievalData:
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv", ".tsv", ".parquet"):
        raise DataError(where=path, expected="a BEIR folder or a .jsonl/.csv/.tsv/.parquet "
                        f"table with columns {query_column}, {document_column}",
                        got=f"a {suffix or 'suffix-less'} file")  # fmt: skip
    names, records = read_records(path)
    for option, name in (("query", query_column), ("document", document_column)):
        if name not in names:
            if path.name in _BEIR_FILES or "_id" in names:  # a file of a BEIR folder
                raise DataError(where=path, expected="a BEIR folder (read whole) or a table of "
                                "(query, document) rows", got="it is a file of a BEIR folder",
                                fix=f"Pass the folder ({path.parent}) holding corpus.jsonl, "
                                "queries.jsonl and qrels/SPLIT.tsv.")  # fmt: skip
            raise DataError(where=path, arg=f"{option}_column", expected="a column of the file",
                            got=repr(name), fix=f"Its columns: {', '.join(names) or 'none'}.")  # fmt: skip
    queries: dict[str, int] = {}
    docs: dict[str, int] = {}
    seen: dict[tuple[int, int], str] = {}
    rows = []
    for where, rec in records:
        q = _text(rec, query_column, where)
        d = _text(rec, document_column, where)
        for name, value in ((query_column, q), (document_column, d)):
            if not value.strip():
                raise DataError(where=where, expected=f"a value in {name!r}", got="it is empty")
        key = (queries.setdefault(q, len(queries)), docs.setdefault(d, len(docs)))
        if key in seen:
            raise DataError(where=where, expected="each (query, document) row once",
                            got=f"it was first at {seen[key]}")  # fmt: skip
        seen[key] = where
        rows.append((*key, 1))
    if not rows:
        raise DataError(where=path, expected="(query, document) rows", got="none was found")
    qrels = np.asarray(rows, dtype=np.int64)
    qrels = qrels[np.lexsort((qrels[:, 1], qrels[:, 0]))]
    return RetrievalData(
        [f"q{i}" for i in range(len(queries))], list(queries),
        [f"d{i}" for i in range(len(docs))], list(docs), qrels, str(path),
    )  # fmt: skip


def query_metrics(ranked: np.ndarray, qrels: np.ndarray, n_docs: int) -> np.ndarray:
    """Per-query ``(Q, 4)``: nDCG@10, MRR@10, Recall@100, MAP@100 (:data:`METRICS`).

    ``ranked`` int64 ``(Q, k)`` document indices, best first (k >= 100, or the whole
    corpus); ``qrels`` as in :class:`RetrievalData`.
    """
    n_q = len(ranked)
    keys = qrels[:, 0] * n_docs + qrels[:, 1]  # sorted, as qrels is
    hit_keys = np.arange(n_q)[:, None] * n_docs + ranked
    pos = np.clip(np.searchsorted(keys, hit_keys), 0, len(keys) - 1)
    gain = np.where(keys[pos] == hit_keys, qrels[pos, 2], 0).astype(np.float64)  # (Q, k)
    relevant = gain > 0
    gain = np.where(relevant, gain, 0.0)
    n_rel = np.bincount(qrels[qrels[:, 2] > 0, 0], minlength=n_q).astype(np.float64)

    cut = min(10, ranked.shape[1])
    discount = 1.0 / np.log2(np.arange(2, cut + 2))
    dcg = (gain[:, :cut] * discount).sum(axis=1)
    ideal = np.zeros((n_q, cut))
    judged = qrels[qrels[:, 2] > 0]
    # Ideal DCG: each query's positive judgements, largest first, in the first 10 slots.
    order = np.lexsort((-judged[:, 2], judged[:, 0]))
    judged = judged[order]
    starts = np.searchsorted(judged[:, 0], judged[:, 0], side="left")
    slot = np.arange(len(judged)) - starts
    keep = slot < cut
    ideal[judged[keep, 0], slot[keep]] = judged[keep, 2]
    ndcg = dcg / (ideal * discount).sum(axis=1)

    first = np.argmax(relevant[:, :cut], axis=1)
    mrr = np.where(relevant[:, :cut].any(axis=1), 1.0 / (first + 1), 0.0)

    deep = relevant[:, :DEPTH]
    recall = deep.sum(axis=1) / n_rel
    hits = np.cumsum(deep, axis=1)
    precision = hits / np.arange(1, deep.shape[1] + 1)
    ap = (precision * deep).sum(axis=1) / n_rel
    return np.stack([ndcg, mrr, recall, ap], axis=1)


def score(encoder: Any, data: RetrievalData, train: Any, cands: Sequence[Any], settings: Any):
    """``compare``'s scorer: one forward pass over the distinct query and document texts
    (the queries' timed apart: :mod:`poolkit.compare.cost`),
    then per candidate an exact top-100 search and the per-query metrics
    (:class:`~poolkit.compare.evaluation.QueryEval`). Multi-vector candidates are scored
    by :func:`poolkit.compare.multivector.multivector_rows` (MaxSim, MUVERA), on the token
    states of the dense rows' forward pass where they are the same tokens
    (:func:`~poolkit.compare.multivector.shares_forward_pass`), else on their own."""
    from poolkit.compare.evaluation import QueryEval
    from poolkit.compare.multivector import multivector_rows, shares_forward_pass

    dense = [c for c in cands if c.level != "multivector"]
    multi = [c for c in cands if c.level == "multivector"]
    out: dict[Any, Any] = {}
    states = None
    if dense:
        share = bool(multi) and shares_forward_pass(encoder, settings)
        scored, states = _score_dense(encoder, data, dense, settings, keep_tokens=share)
        out.update(scored)
    if multi:
        ranked_by, facts = multivector_rows(encoder, data, multi, settings, DEPTH,
                                            id_order(data.doc_ids), states)  # fmt: skip
        for key, ranked in ranked_by.items():
            out[key] = QueryEval(query_metrics(ranked, data.qrels, len(data.documents)))
            settings.budget_facts[key if isinstance(key, tuple) else (key, None)] = facts[key]
    return out


def _score_dense(
    encoder: Any, data: RetrievalData, cands: Sequence[Any], settings: Any, keep_tokens: bool
) -> tuple[dict[Any, Any], Any]:
    """:func:`score` of the dense candidates, and with ``keep_tokens`` the queries' and
    documents' token states of the same forward pass (``(queries, documents)``, one
    ``(tokens, H)`` array per text; else None)."""
    from poolkit.compare.embedding import embed_sequences
    from poolkit.compare.evaluation import QueryEval
    from poolkit.compare.multivector import TokenStates

    ties = id_order(data.doc_ids)
    out = {}
    states = None
    # Each side in one pass of its own, every text as `poolkit embed` reads it (duplicates
    # kept): the printed commands then batch each text as this pass did, and give the same
    # bits (docs/equality.md). The queries' pass is timed: the queries' encoding time.
    q_tap = TokenStates(len(data.queries)) if keep_tokens else None
    d_tap = TokenStates(len(data.documents)) if keep_tokens else None
    (queries, _), query_seconds = model_time(encoder, lambda: embed_sequences(
        encoder, data.queries, cands, settings, f"embedding {data.source} queries",
        settings.prompt_name, tap=q_tap))  # fmt: skip
    documents, stats = embed_sequences(
        encoder, data.documents, cands, settings, f"embedding {data.source} documents",
        settings.document_prompt_name, tap=d_tap,
    )  # fmt: skip
    cut = stats.num_truncated
    if q_tap is not None and d_tap is not None:
        states = (q_tap.vectors, d_tap.vectors)
    stages = getattr(settings, "stages", None) or {}
    facts = getattr(settings, "budget_facts", {})
    per_query = 1000 / max(len(data.queries), 1)
    costs = getattr(settings, "costs", {})
    costs["query_ms"] = query_seconds * per_query  # every row of this forward pass
    for c in cands:
        search = partial(top_k, queries[c], documents[c], id_order=ties)
        deep = keep_depth(settings, (c, None), DEPTH)
        (ranked, scores), own, fused = timed_depths(search, DEPTH, deep)
        if stages:
            facts[(c, None)] = {"search_ms": own * per_query}
        costs[(c, None)] = {"search_ms": own * per_query, "fused_search_ms": fused * per_query,
                            "dims": documents[c].shape[1]}  # fmt: skip
        record(settings, (c, None), ranked, scores)
        out[c] = QueryEval(query_metrics(ranked, data.qrels, len(data.documents)))
        del ranked, scores
    # Document rows (poolkit.compare.documents): the intended recipe's documents whole
    # (windows) and in chunks, each document scored by its best chunk.
    base = getattr(settings, "document_base", None)
    if base is not None:
        from poolkit.compare.documents import document_rows

        ranked_by = document_rows(encoder, data.documents, base, settings.chunk_tokens,
                                  queries[base], settings, DEPTH, ties, data.source)  # fmt: skip
        for label, ranked in ranked_by.items():
            record(settings, (base, label), ranked)
            out[(base, label)] = QueryEval(query_metrics(ranked, data.qrels, len(data.documents)))
    elif cut and getattr(settings, "long_text", "truncate") == "truncate":
        from poolkit.compare.documents import suggested_sizes

        settings.notes.append(
            f"{cut} of {len(data.documents)} documents are longer than the model's "
            f"{encoder.max_length} tokens and were truncated in every row; --chunk-tokens "
            f"{suggested_sizes(encoder.text_room)} adds rows of whole documents (windows) "
            "and chunked documents."
        )
    # Budget rows (poolkit.compare.budget): the stored forms of each base row's vectors,
    # int8 ranges from the documents, each searched exactly and timed.
    from poolkit.compare.budget import retrieval_rows
    from poolkit.compare.fits import own_fits

    fitted = own_fits(encoder, settings, documents, f"{len(data.documents)} documents",
                      getattr(settings, "fit_train", None), data.documents) if stages else {}  # fmt: skip
    fits = {r: f.fit for r, f in fitted.items()}
    for base, stage in stages.items():
        # (--precision float32 alone leaves a base without budget rows: its own row)
        deep = max((keep_depth(settings, (r, "stored"), DEPTH) for r in stage.recipes),
                   default=DEPTH)  # fmt: skip
        rows = retrieval_rows(queries[base], documents[base], stage, DEPTH, ties, deep, fits)
        for (r, rescore), (ranked, seconds, fused, cal) in rows.items():
            key = (r, "rescore" if rescore else "stored")
            record(settings, key, ranked)
            out[key] = QueryEval(query_metrics(ranked, data.qrels, len(data.documents)))
            facts[key] = {
                "search_ms": seconds * per_query,
                "fused_search_ms": fused * per_query,
                "calibration": f"{len(data.documents)} documents" if cal else None,
                "ranges": cal,
            }
    return out, states
