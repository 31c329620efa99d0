"""`poolkit compare --dims/--precision`: budget rows on the committed fixtures with the real
model, each figure checked against an independent computation: sentence-transformers'
vectors, its `quantize_embeddings`, bits unpacked with NumPy, and the retrieval metrics of
a ranking built here scored by pytrec_eval (trec_eval)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from scipy.stats import spearmanr
from testdata import fixture, read_beir, read_sts_pairs

RETRIEVAL = Path(__file__).parent / "data" / "stsb-images-retrieval"


def _quantize_embeddings():
    try:
        from sentence_transformers.util.quantization import quantize_embeddings
    except ImportError:  # sentence-transformers before 5
        from sentence_transformers.quantization import quantize_embeddings
    return quantize_embeddings


def run_json(tmp_path: Path, *args: str) -> tuple[dict, str]:
    result = poolkit("compare", *args, "--json", "out.json", "--quiet", "--explain", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads((tmp_path / "out.json").read_text()), result.stdout.decode()


def by_recipe(doc: dict) -> dict[tuple[str, bool], dict]:
    return {(r["recipe"], r.get("rescore", False)): r for r in doc["results"]}


def truncated(v: np.ndarray, k: int) -> np.ndarray:
    """Matryoshka truncation as sentence-transformers does it for a normalising model."""
    out = v[:, :k].astype(np.float64)
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def bits(packed: np.ndarray, k: int) -> np.ndarray:
    """0/1 bits of `quantize_embeddings(..., "binary")` (int8 bytes offset by -128)."""
    raw = (packed.astype(np.int16) + 128).astype(np.uint8)
    return np.unpackbits(raw, axis=1, count=k)


def cosine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x.astype(np.float64), y.astype(np.float64)
    return (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


@pytest.mark.slow
def test_sts_budget_rows_match_sentence_transformers(tmp_path, minilm_st):
    quantize_embeddings = _quantize_embeddings()
    data = fixture("stsb-dev-sample.csv")
    doc, out = run_json(
        tmp_path, str(data), "--task", "sts", "--strategies", "mean", "cls",
        "--dims", "384", "128", "--precision", "float32", "int8", "binary",
        "--bootstrap", "200", "--report", "page.html",
    )  # fmt: skip
    rows = by_recipe(doc)
    # Intended strategy only: 2 dims x 3 precisions, less (384, float32) = the mean row.
    budget = sorted(name for (name, _), r in rows.items() if r["recipe"].count("/"))
    assert budget == ["mean/128", "mean/128/binary", "mean/128/int8", "mean/384/binary",
                      "mean/384/int8"]  # fmt: skip
    pairs = read_sts_pairs(data)
    gold = np.array([p[0] for p in pairs])
    unique = list(dict.fromkeys([p[1] for p in pairs] + [p[2] for p in pairs]))
    where = {t: i for i, t in enumerate(unique)}
    a = np.array([where[p[1]] for p in pairs])
    b = np.array([where[p[2]] for p in pairs])
    full = minilm_st.encode(unique, convert_to_numpy=True)
    for k in (384, 128):
        v = truncated(full, k) if k < full.shape[1] else full
        packed = quantize_embeddings(v, precision="binary")
        ham = (bits(packed[a], k) != bits(packed[b], k)).sum(1)
        binary = rows[(f"mean/{k}/binary", False)]
        assert binary["spearman"] == pytest.approx(spearmanr(1 - ham / k, gold)[0], abs=1e-6)
        ints = quantize_embeddings(v, precision="int8", calibration_embeddings=v)
        int8 = rows[(f"mean/{k}/int8", False)]
        assert int8["spearman"] == pytest.approx(spearmanr(cosine(ints[a], ints[b]), gold)[0],
                                                 abs=1e-6)  # fmt: skip
        for row, precision, size in ((binary, "binary", k // 8), (int8, "int8", k)):
            assert (row["dims"], row["precision"], row["bytes_per_vector"]) == (k, precision, size)
            assert row["calibration"] == ("330 distinct sentences" if precision == "int8" else None)
            assert not row["intended"] and row["difference"]["metric"] == "spearman"
            lo, hi = row["difference"]["ci"]
            assert lo <= row["difference"]["value"] <= hi
            assert row["vs_float32"] == row["difference"]  # the intended row is mean's own
    f128 = rows[("mean/128", False)]
    assert f128["spearman"] == pytest.approx(
        spearmanr(cosine(truncated(full, 128)[a], truncated(full, 128)[b]), gold)[0], abs=1e-6
    )
    assert (f128["dims"], f128["precision"], f128["bytes_per_vector"]) == (128, "float32", 512)
    mean, cls = rows[("mean", False)], rows[("cls", False)]
    assert mean["intended"] and (mean["dims"], mean["bytes_per_vector"]) == (384, 1536)
    assert cls["precision"] == "float32" and cls["vs_float32"] is None
    # The table: a bytes column; the int8 ranges said; an int8 row's command reuses the ranges
    # the row was scored with (the --json file holds them, #38).
    assert "bytes" in out.split("\n\n", 1)[1].splitlines()[0]  # the table, after the answer
    assert "per-dimension min and max of the 330 distinct sentences' vectors" in out
    page = (tmp_path / "page.html").read_text()
    assert "--recipe mean/128/int8 --ranges out.json" in page
    assert "--recipe mean/128/binary" in page


def _retrieval_reference(minilm_st):
    """Texts, ids and sentence-transformers vectors of the retrieval fixture, read here."""
    dids, docs, queries, qrels = read_beir(RETRIEVAL)
    qids = [q for q in queries if q in qrels]
    q_vec = minilm_st.encode([queries[q] for q in qids], convert_to_numpy=True)
    d_vec = minilm_st.encode(docs, convert_to_numpy=True)
    return qids, dids, qrels, q_vec, d_vec


def _trec(qrels, qids, dids, scores: np.ndarray, measure: str) -> float:
    import pytrec_eval

    run = {q: {d: float(s) for d, s in zip(dids, row, strict=True)}
           for q, row in zip(qids, scores, strict=True)}  # fmt: skip
    res = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)
    return float(np.mean([v[measure] for v in res.values()]))


@pytest.mark.slow
def test_retrieval_budget_rows_match_pytrec_eval(tmp_path, minilm_st):
    pytest.importorskip("pytrec_eval")
    quantize_embeddings = _quantize_embeddings()
    doc, out = run_json(
        tmp_path, str(RETRIEVAL), "--task", "retrieval", "--strategies", "mean",
        "--dims", "384", "128", "--precision", "int8", "binary", "--bootstrap", "0",
    )  # fmt: skip
    rows = by_recipe(doc)
    qids, dids, qrels, q_full, d_full = _retrieval_reference(minilm_st)
    for k in (384, 128):
        q, d = (truncated(q_full, k), truncated(d_full, k)) if k < 384 else (q_full, d_full)
        qb, db = (
            bits(quantize_embeddings(q, "binary"), k),
            bits(quantize_embeddings(d, "binary"), k),
        )
        hamming = (qb[:, None, :] != db[None, :, :]).sum(2)
        row = rows[(f"mean/{k}/binary", False)]
        assert row["ndcg_at_10"] == pytest.approx(
            _trec(qrels, qids, dids, k - hamming, "ndcg_cut_10"), abs=1e-9
        )
        assert row["map_at_100"] == pytest.approx(
            _trec(qrels, qids, dids, k - hamming, "map_cut_100"), abs=1e-9
        )
        assert (row["precision"], row["bytes_per_vector"], row["rescore"]) == (
            "binary",
            k // 8,
            False,
        )
        # +rescore: the 400 nearest by Hamming distance (ties: larger id first, as trec_eval),
        # re-ranked by the float query against the documents' bits as ±1.
        rank = {x: i for i, x in enumerate(sorted(dids))}
        rescored = np.full(hamming.shape, -np.inf)
        for i, h in enumerate(hamming):
            order = sorted(range(len(dids)), key=lambda j, h=h: (h[j], -rank[dids[j]]))
            top = np.array(order[:400])
            rescored[i, top] = (2.0 * db[top] - 1) @ q[i].astype(np.float64)
        rescored = np.where(np.isinf(rescored), -1e9, rescored)
        row = rows[(f"mean/{k}/binary", True)]
        assert row["ndcg_at_10"] == pytest.approx(
            _trec(qrels, qids, dids, rescored, "ndcg_cut_10"), abs=1e-6
        )
        # int8: documents calibrate the ranges, queries use them; integer dot products.
        qi = quantize_embeddings(q, "int8", calibration_embeddings=d).astype(np.float64)
        di = quantize_embeddings(d, "int8", calibration_embeddings=d).astype(np.float64)
        row = rows[(f"mean/{k}/int8", False)]
        assert row["ndcg_at_10"] == pytest.approx(
            _trec(qrels, qids, dids, qi @ di.T, "ndcg_cut_10"), abs=1e-9
        )
        assert row["calibration"] == f"{len(dids)} documents"
    for r in doc["results"]:
        assert r["search_ms_per_query"] > 0
    # Every row's query cost, its search measured in the run included: one column.
    assert "query ms" in out.split("\n\n", 1)[1].splitlines()[0]
    assert "+rescore: the 400 nearest documents by Hamming distance" in out


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--precision", "int4"], ["--precision", "float32, float16, int8", "'int4'"]),
        (["--dims", "0"], ["--dims", "positive", "e.g. --dims 384"]),
        (["--budget-rows", "all"], ["Expected --budget-rows to be given only with --dims or --precision"]),
        (["--task", "classification", "--dims", "128"], ["Expected --dims to be given only for --task sts and retrieval"]),
    ],
)  # fmt: skip
def test_bad_budget_options_one_line_before_the_model(tmp_path, args, fragments):
    task = [] if "--task" in args else ["--task", "sts"]
    data = fixture("sentiment.txt" if "classification" in args else "stsb-dev-sample.csv")
    result = poolkit("compare", str(data), *task, *args, "--model", "no/such-model",
                     cwd=tmp_path)  # fmt: skip
    one_error_line(result, 2, *fragments)  # refused before the (missing) model is looked up


@pytest.mark.slow
def test_dims_wider_than_the_model_one_line(tmp_path):
    result = poolkit("compare", str(fixture("stsb-dev-sample.csv")), "--task", "sts",
                     "--dims", "512", cwd=tmp_path)  # fmt: skip
    one_error_line(result, 2, "--dims", "at most 384", "512", "e.g. 256")
