"""One retrieval run of all-MiniLM-L6-v2 on the committed SQuAD BEIR fixture with every
row family beside its cost: ``mean``, ``mean/256/int8``, ``mean/binary`` (+ rescore),
``bm25``, ``rrf(mean,bm25)`` and the MaxSim row. Each row's nDCG@10 is recomputed here
independently (sentence-transformers vectors and token vectors, ``bm25s``, NumPy ranking
and fusion, ``pytrec_eval``); bytes per document by the formula; the paired interval of
``rrf(mean,bm25)`` against ``mean`` by a paired bootstrap drawn here with compare's seed
scheme (``default_rng(seed).integers(0, Q, (R, Q))``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clitools import poolkit

pytrec_eval = pytest.importorskip("pytrec_eval")
SQUAD = Path(__file__).parent / "data" / "squad-titled-retrieval"
MAXSIM = "multivector:tokens/l2"
ROWS = ("mean", "mean/256/int8", "mean/binary", "bm25", "rrf(mean,bm25)", MAXSIM)
RESAMPLES = 1000


def _quantize_embeddings():
    try:
        from sentence_transformers.util.quantization import quantize_embeddings
    except ImportError:  # sentence-transformers before 5
        from sentence_transformers.quantization import quantize_embeddings
    return quantize_embeddings


def _per_query(qrels, qids, dids, scores: np.ndarray) -> np.ndarray:
    """pytrec_eval's nDCG@10 per query ``(Q,)`` of full score rows (ties: trec_eval's)."""
    run = {q: {d: float(s) for d, s in zip(dids, row, strict=True)}
           for q, row in zip(qids, scores, strict=True)}  # fmt: skip
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return np.array([per[q]["ndcg_cut_10"] for q in qids])


def _ranks(scores: np.ndarray, order: np.ndarray, depth: int) -> np.ndarray:
    """1-based rank of every document in each row's top ``depth`` (ties: larger ``order``
    first), 0 outside it."""
    out = np.zeros(scores.shape, dtype=np.int64)
    for i, row in enumerate(scores):
        top = np.lexsort((-order, -row))[:depth]
        out[i, top] = np.arange(1, len(top) + 1)
    return out


@pytest.mark.slow  # the real model: one compare, one sentence-transformers pass (~50 CPU-s)
def test_one_run_every_family_priced_and_fused(tmp_path, minilm_dir, minilm_st):
    import bm25s

    quantize_embeddings = _quantize_embeddings()
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", *ROWS,
                  "--model", str(minilm_dir), "--json", "out.json", "--quiet", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((tmp_path / "out.json").read_text())
    rows = {(r["recipe"], r.get("rescore") or False): r for r in doc["results"]}
    assert set(rows) == {*((r, False) for r in ROWS), ("mean/binary", True)}

    corpus = [json.loads(x) for x in (SQUAD / "corpus.jsonl").read_text().splitlines()]
    queries = {(q := json.loads(x))["_id"]: q["text"]
               for x in (SQUAD / "queries.jsonl").read_text().splitlines()}  # fmt: skip
    qrels: dict[str, dict[str, int]] = {}
    for line in (SQUAD / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, rel = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(rel)
    qids = [q for q in queries if q in qrels]
    dids = [d["_id"] for d in corpus]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
    order = np.argsort(np.argsort(np.asarray(dids, dtype=object), kind="stable"))
    q_text = [queries[q] for q in qids]
    n = len(dids)

    # One sentence-transformers pass a side: the (normalised) vectors and the token vectors.
    encoded = [minilm_st.encode(x, output_value=None) for x in (q_text, texts)]
    q, d = (np.stack([o["sentence_embedding"].numpy() for o in e]) for e in encoded)
    q_tok, d_tok = (
        [o["token_embeddings"][o["attention_mask"].bool()].numpy().astype(np.float64) for o in e]
        for e in encoded
    )
    # Dense: cosine of the vectors.
    dense = q.astype(np.float64) @ d.astype(np.float64).T
    # int8 at 256 dims: truncated, normalised again, ranges from the documents.
    q256, d256 = (v[:, :256] / np.linalg.norm(v[:, :256], axis=1, keepdims=True) for v in (q, d))
    qi = quantize_embeddings(q256, "int8", calibration_embeddings=d256).astype(np.float64)
    di = quantize_embeddings(d256, "int8", calibration_embeddings=d256).astype(np.float64)
    # Binary: minus the Hamming distance of the sign bits; +rescore: the 400 nearest
    # re-ranked by the float query against the bits as +-1.
    qb = np.unpackbits((quantize_embeddings(q, "binary").astype(np.int16) + 128).astype(np.uint8),
                       axis=1)  # fmt: skip
    db = np.unpackbits((quantize_embeddings(d, "binary").astype(np.int16) + 128).astype(np.uint8),
                       axis=1)  # fmt: skip
    hamming = (qb[:, None, :] != db[None, :, :]).sum(2)
    rescored = np.full(hamming.shape, -1e9)
    for i, h in enumerate(hamming):
        top = np.lexsort((-order, h))[:400]
        rescored[i, top] = (2.0 * db[top] - 1) @ q[i].astype(np.float64)
    # BM25: bm25s with compare's defaults.
    index = bm25s.BM25()
    index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(q_text, stopwords="en", return_ids=False, show_progress=False)
    lexical = np.stack([index.get_scores(list(t)) for t in tokens]).astype(np.float64)
    # RRF, k = 60, over each side's top 1000 (here: the whole corpus).
    ra, rb = _ranks(dense, order, 1000), _ranks(lexical, order, 1000)
    fused = np.where(ra > 0, 1.0 / (60 + ra), 0.0) + np.where(rb > 0, 1.0 / (60 + rb), 0.0)
    # MaxSim of the L2-normalised token vectors.
    q_tok, d_tok = (
        [t / np.linalg.norm(t, axis=1, keepdims=True) for t in x] for x in (q_tok, d_tok)
    )
    maxsim = np.array([[(a @ b.T).max(axis=1).sum() for b in d_tok] for a in q_tok])

    reference = {
        ("mean", False): dense, ("mean/256/int8", False): qi @ di.T,
        ("mean/binary", False): -hamming.astype(np.float64), ("mean/binary", True): rescored,
        ("bm25", False): lexical, ("rrf(mean,bm25)", False): fused, (MAXSIM, False): maxsim,
    }  # fmt: skip
    per_query = {key: _per_query(qrels, qids, dids, s) for key, s in reference.items()}
    for key, values in per_query.items():
        assert rows[key]["ndcg_at_10"] == pytest.approx(values.mean(), abs=1e-4), key

    # Bytes per document by the formula; the hybrid's the sum of its two rows'.
    lengths = np.array([len(t) for t in d_tok])
    bm25_bytes = index.scores["data"].size * (4 + 4) / n
    want_bytes = {
        ("mean", False): 384 * 4, ("mean/256/int8", False): 256, ("mean/binary", False): 384 / 8,
        ("mean/binary", True): 384 / 8, ("bm25", False): bm25_bytes,
        (MAXSIM, False): round(lengths.mean() * 384 * 4),
        ("rrf(mean,bm25)", False): 384 * 4 + bm25_bytes,
    }  # fmt: skip
    for key, value in want_bytes.items():
        row = rows[key]
        assert row["bytes_per_document"] == pytest.approx(value, rel=1e-9), key
        assert row["index_bytes"]["100000000"] == pytest.approx(1e8 * value, rel=1e-9), key
        assert row["query_ms"] > 0 and row["search_ms"] > 0, key
    hybrid = rows[("rrf(mean,bm25)", False)]
    assert hybrid["encode_ms"] == pytest.approx(rows[("mean", False)]["encode_ms"]
                                                + rows[("bm25", False)]["encode_ms"])  # fmt: skip
    assert hybrid["query_ms"] == pytest.approx(hybrid["encode_ms"] + hybrid["search_ms"])
    # Its search: each side's to the depth it fuses (1000), timed apart from the side's own.
    assert hybrid["search_ms"] == pytest.approx(rows[("mean", False)]["fused_search_ms"]
                                                + rows[("bm25", False)]["fused_search_ms"])  # fmt: skip
    assert rows[(MAXSIM, False)]["fused_search_ms"] == rows[(MAXSIM, False)]["search_ms"]
    assert doc["costs_measured_on"]["device"] == "cpu"

    # The paired interval of rrf(mean,bm25) vs mean (the * row), redrawn here.
    idx = np.random.default_rng(doc["bootstrap"]["seed"]).integers(
        0, len(qids), size=(RESAMPLES, len(qids))
    )
    a, b = per_query[("rrf(mean,bm25)", False)], per_query[("mean", False)]
    lo, hi = np.percentile(a[idx].mean(axis=1) - b[idx].mean(axis=1), [2.5, 97.5])
    difference = hybrid["difference"]
    assert difference["value"] == pytest.approx(a.mean() - b.mean(), abs=1e-4)
    assert difference["ci"] == pytest.approx([lo, hi], abs=1e-4)
    # Both rows' commands: the dense row's embed commands and BM25's index call.
    assert hybrid["embed_command"].startswith("mean: poolkit embed ")
    assert " ; bm25: bm25s.BM25(k1=1.5, b=0.75)" in hybrid["embed_command"]
    print({k[0] + (" +rescore" if k[1] else ""): round(rows[k]["ndcg_at_10"], 4) for k in rows})
