"""``compare --task retrieval`` with sparse and BM25 rows, each against an independent
recomputation: sentence-transformers' SparseEncoder vectors ranked by hand and scored by
pytrec_eval; its SparseInformationRetrievalEvaluator for active dims and FLOPS; bm25s
run directly for the BM25 rows (on BEIR folders with titles: one derived here, and the
committed SQuAD fixture); an inference-free model's queries through its query route."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from beir_ref import read_qrels
from clitools import poolkit
from tie_bounds import metric_range
from tiny_models import build_inference_free, build_mlm

from poolkit.compare.retrieval import read_retrieval
from poolkit.compare.runner import Settings, compare
from poolkit.compare.sparse_rows import BM25, parse_bm25, split_extra
from poolkit.encoder import Encoder
from poolkit.recipe import Recipe

pytrec_eval = pytest.importorskip("pytrec_eval")
pq = pytest.importorskip("pyarrow.parquet")
pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")
FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"
SQUAD = Path(__file__).parent / "data" / "squad-titled-retrieval"  # titles: article names


@pytest.fixture(scope="module")
def titled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed BEIR fixture's first 200 documents and the judgements on them, the
    first 120 given titles (the first three words of the next document), so that the
    title join is exercised."""
    root = tmp_path_factory.mktemp("titled")
    docs = [json.loads(x) for x in (FIXTURE / "corpus.jsonl").read_text().splitlines()][:200]
    for k, d in enumerate(docs[:120]):
        d["title"] = " ".join(docs[k + 1]["text"].split()[:3])
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_bytes((FIXTURE / "queries.jsonl").read_bytes())
    (root / "qrels").mkdir()
    kept = {d["_id"] for d in docs}
    lines = (FIXTURE / "qrels" / "test.tsv").read_text().splitlines()
    judged = [x for x in lines[1:] if x.split("\t")[1] in kept]
    (root / "qrels" / "test.tsv").write_text("\n".join([lines[0], *judged]) + "\n")
    return root


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mlm("bert_dense", tmp_path_factory.mktemp("mlm") / "bert")


def _qrels(data) -> dict[str, dict[str, int]]:
    qrels = {data.query_ids[q]: {} for q in range(len(data.queries))}
    for q, d, rel in data.qrels.tolist():
        qrels[data.query_ids[q]][data.doc_ids[d]] = int(rel)
    return qrels


def _trec(data, scores: np.ndarray) -> dict[str, float]:
    """Mean nDCG@10, Recall@100, MAP@100 of a full score matrix, by pytrec_eval."""
    qrels = _qrels(data)
    run = {data.query_ids[q]: {data.doc_ids[d]: float(s) for d, s in enumerate(row)}
           for q, row in enumerate(scores)}  # fmt: skip
    measures = {"ndcg_cut.10", "recall.100", "map_cut.100"}
    per = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    keys = {"ndcg_at_10": "ndcg_cut_10", "recall_at_100": "recall_100", "map_at_100": "map_cut_100"}
    return {k: float(np.mean([v[t] for v in per.values()])) for k, t in keys.items()}


def _trec_range(data, scores: np.ndarray, eps: np.ndarray) -> dict[str, tuple[float, float]]:
    """:func:`_trec`'s metrics as ``(worst, best)`` over the orders of near-ties."""
    keys = {"ndcg_at_10": "ndcg_cut_10", "recall_at_100": "recall_100", "map_at_100": "map_cut_100"}
    return metric_range(_qrels(data), data.query_ids, data.doc_ids, scores, eps, keys)


def test_sparse_and_bm25_rows_equal_independent_recomputation(titled: Path, mlm: Path) -> None:
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    data = read_retrieval(titled)
    assert data.documents[0] == "A passenger train Two green and white trains on tracks."
    encoder = Encoder(mlm, max_length=64)
    rows = ["mean", "splade", "splade_sum/top24", "bm25", "bm25/k1=0.9/b=0.4"]
    settings = Settings("retrieval", strategies=rows, bootstrap=200)
    results = {str(r.recipe): r for r in compare(encoder, data, settings)}
    assert set(results) == set(rows)

    for name, (pooling, k) in {"splade": ("max", None), "splade_sum/top24": ("sum", 24)}.items():
        modules = [MLMTransformer(str(mlm), max_seq_length=64), SpladePooling(pooling, "relu")]
        st = SparseEncoder(modules=modules, device="cpu", max_active_dims=k)
        q = st.encode(data.queries, convert_to_tensor=True).to_dense().numpy()
        d = st.encode(data.documents, convert_to_tensor=True).to_dense().numpy()
        scores = q.astype(np.float64) @ d.T.astype(np.float64)
        got = results[name]
        # Tie-aware (tests/tie_bounds.py): the two forward passes (poolkit's and
        # sentence-transformers', float32, other kernels and batch shapes) give weights
        # that agree to ~1e-6 relative; SPLADE weights are >= 0, so a score's relative
        # error is at most about twice that. Scores within 1e-5 of the query's best are
        # near-ties either side may order either way: the tiny random model makes many
        # (map@100 0.04234 vs 0.04238 in one parallel run), so the row lies between the
        # worst and best orders of them (one value where there are none).
        eps = 1e-5 * np.abs(scores).max(axis=1)
        for metric, (worst, best) in _trec_range(data, scores, eps).items():
            assert worst - 1e-6 <= got.metrics[metric] <= best + 1e-6, (name, metric, worst, best)
        assert got.vs_intended is not None and got.ci["ndcg_at_10"][0] <= got.metrics["ndcg_at_10"]
        if k is None:
            continue
        # Active dims and FLOPS as sentence-transformers' evaluator reports them (once: it
        # embeds everything again).
        evaluator = SparseInformationRetrievalEvaluator(
            queries=dict(zip(data.query_ids, data.queries, strict=True)),
            corpus=dict(zip(data.doc_ids, data.documents, strict=True)),
            relevant_docs={data.query_ids[a]: {data.doc_ids[b]} for a, b, r in data.qrels if r > 0},
            max_active_dims=k, show_progress_bar=False, batch_size=64,
        )  # fmt: skip
        ev = evaluator(st)
        pick = {suffix: next(v for key, v in ev.items() if key.endswith(suffix))
                for suffix in ("query_active_dims", "corpus_active_dims", "avg_flops")}  # fmt: skip
        assert got.active_dims_query == pytest.approx(pick["query_active_dims"], rel=1e-6)
        assert got.active_dims_document == pytest.approx(pick["corpus_active_dims"], rel=1e-6)
        assert got.flops == pytest.approx(pick["avg_flops"], rel=1e-5)
        assert got.bytes_per_document == pytest.approx(8 * pick["corpus_active_dims"], rel=1e-6)
        assert got.bytes_per_document_f16 == pytest.approx(6 * pick["corpus_active_dims"], rel=1e-6)

    for name, (k1, b) in {"bm25": (1.5, 0.75), "bm25/k1=0.9/b=0.4": (0.9, 0.4)}.items():
        got = results[name]
        assert got.metrics["ndcg_at_10"] == pytest.approx(_bm25_ndcg(titled, k1, b), abs=1e-4)
        assert got.flops is None and got.vs_intended is not None  # paired with the * row


def _read_beir(folder: Path) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(doc ids, documents, query ids, queries)`` of a BEIR folder, read here: a document
    is ``(title + " " + text).strip()`` when it has a title field (MTEB's join)."""
    docs = [json.loads(x) for x in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(x) for x in (folder / "queries.jsonl").read_text().splitlines()]
    joined = [(d["title"] + " " + d["text"]).strip() if "title" in d else d["text"].strip()
              for d in docs]  # fmt: skip
    return ([d["_id"] for d in docs], joined, [q["_id"] for q in queries],
            [q["text"] for q in queries])  # fmt: skip


def _bm25_ndcg(folder: Path, k1: float, b: float) -> float:
    """Mean nDCG@10 of bm25s run directly on BEIR ``folder``: ``bm25s.tokenize(texts,
    stopwords="en")``, ``bm25s.BM25(k1=k1, b=b)`` (method lucene), every document scored,
    ranked by NumPy (score, ties to the larger id as trec_eval and compare break them),
    scored by pytrec_eval."""
    import bm25s

    doc_ids, documents, query_ids, queries = _read_beir(folder)
    index = bm25s.BM25(k1=k1, b=b)
    index.index(bm25s.tokenize(documents, stopwords="en", show_progress=False),
                show_progress=False)  # fmt: skip
    found, scores = index.retrieve(bm25s.tokenize(queries, stopwords="en", show_progress=False),
                                   k=len(documents), show_progress=False)  # fmt: skip
    full = np.zeros((len(queries), len(documents)))
    np.put_along_axis(full, found, scores, axis=1)
    id_rank = np.argsort(np.argsort(np.asarray(doc_ids, dtype=object), kind="stable"))
    order = np.lexsort((np.broadcast_to(-id_rank, full.shape), -full))[:, :100]
    qrels = read_qrels(folder)
    run = {qid: {doc_ids[d]: float(100 - r) for r, d in enumerate(order[i])}
           for i, qid in enumerate(query_ids) if qid in qrels}  # fmt: skip
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([v["ndcg_cut_10"] for v in per.values()]))


def test_bm25_rows_on_the_committed_titled_fixture_equal_bm25s(mlm: Path) -> None:
    data = read_retrieval(SQUAD)
    assert data.documents[0].startswith("Super Bowl 50 Super Bowl 50 was an American")
    rows = {"bm25": (1.5, 0.75), "bm25/k1=1.2/b=0.5": (1.2, 0.5)}
    settings = Settings("retrieval", strategies=list(rows), bootstrap=0)
    results = {str(r.recipe): r for r in compare(Encoder(mlm, max_length=64), data, settings)}
    for name, (k1, b) in rows.items():
        want = _bm25_ndcg(SQUAD, k1, b)
        assert results[name].metrics["ndcg_at_10"] == pytest.approx(want, abs=1e-4), name


def test_inference_free_rows_send_queries_through_the_query_route(mlm: Path, tmp_path) -> None:
    """compare's sparse rows of a Router model: queries by ``encode_query``, documents by
    ``encode_document``, ranked and scored here; the printed embed commands write them."""
    from sentence_transformers.sparse_encoder import SparseEncoder

    model = build_inference_free(mlm, tmp_path / "model")
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "splade",
                  "splade/top16", "--model", str(model), "--bootstrap", "0", "--json",
                  "s.json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    rows = {r["recipe"]: r for r in json.loads((tmp_path / "s.json").read_text())["results"]}
    assert rows["splade"]["intended"] and not rows["splade/top16"]["intended"]  # its pooling
    st = SparseEncoder(str(model), device="cpu")
    data = read_retrieval(SQUAD)
    for name, k in {"splade": None, "splade/top16": 16}.items():
        q = st.encode_query(data.queries, convert_to_tensor=True, max_active_dims=k)
        d = st.encode_document(data.documents, convert_to_tensor=True, max_active_dims=k)
        q, d = q.to_dense().numpy(), d.to_dense().numpy()
        q = np.pad(q, ((0, 0), (0, d.shape[1] - q.shape[1])))  # the static side's vocabulary
        want = _trec(data, q.astype(np.float64) @ d.T.astype(np.float64))
        assert rows[name]["ndcg_at_10"] == pytest.approx(want["ndcg_at_10"], abs=1e-6), name
        assert rows[name]["active_dims_query"] == pytest.approx(
            np.count_nonzero(q, axis=1).mean(), rel=1e-6)  # fmt: skip
        # The printed commands: the queries' one names the query side.
        queries_cmd = rows[name]["embed_command"].split(" && ")[1]
        assert queries_cmd.endswith("--prompt-name query"), queries_cmd
        argv = shlex.split(queries_cmd)
        ran = poolkit(*argv[1:], cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr.decode()
        table = pq.read_table(tmp_path / argv[argv.index("-o") + 1])
        got = np.zeros_like(q)
        for r, (ids, values) in enumerate(
            zip(
                table[f"{name}_indices"].to_pylist(),
                table[f"{name}_values"].to_pylist(),
                strict=True,
            )
        ):
            got[r, ids] = values
        np.testing.assert_allclose(got, q, rtol=0, atol=1e-5)


def test_row_names() -> None:
    assert str(BM25()) == "bm25" and str(BM25(1.2, 0.75)) == "bm25/k1=1.2"
    assert parse_bm25("bm25/k1=1.2/b=0.5") == BM25(1.2, 0.5) and parse_bm25("mean") is None
    with pytest.raises(ValueError, match="bm25"):
        parse_bm25("bm25/b=2")
    dense, extra = split_extra(["mean", "splade/top8", "bm25"], "retrieval")
    assert dense == ["mean"] and extra == [Recipe.parse("splade/top8"), BM25()]
    assert split_extra(None, "retrieval") == (None, [BM25()])  # BM25 is a default row
    with pytest.raises(ValueError, match="retrieval"):
        split_extra(["splade"], "sts")


def test_a_sparse_row_the_model_cannot_run_is_refused_before_any_forward_pass(
    tiny_dirs, tmp_path, monkeypatch
) -> None:
    """#55: ``compare --recipes mean splade`` on a dense-only model exits 2 naming the row,
    having run no batch through the model (it used to fail after encoding the corpus)."""
    from clitools import one_error_line, run_cli

    import poolkit.encoder

    batches = []

    def no_batches(self, *args, **kwargs):
        batches.append(args)
        raise AssertionError("the model ran before the rows were checked")

    monkeypatch.setattr(poolkit.encoder.Encoder, "iter_batches", no_batches)
    fixture = Path(__file__).parent / "data" / "stsb-images-retrieval"
    out = run_cli(["compare", str(fixture), "--task", "retrieval", "--model",
                   str(tiny_dirs["bert_cls"]), "--recipes", "mean", "splade"], cwd=tmp_path)  # fmt: skip
    one_error_line(out, 2, "'splade'", "masked-language-model head")
    assert not batches
    assert list(tmp_path.iterdir()) == []  # nothing written
