"""`poolkit compare --task retrieval --chunk-tokens N ...`: document rows (the intended
recipe's documents whole through windows, in naive and in late chunks) on the committed
long-document fixture, each figure checked against an independent computation: the
documents embedded with `poolkit.embed_chunks` / `poolkit.embed(long_text="window")`, the
queries with `poolkit.embed`, each document scored by its best chunk's cosine, the run
scored by pytrec_eval (trec_eval); and the refusals, one line each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from metric_reference import exact_unit_vectors
from testdata import fixture

LONGDOCS = Path(__file__).parent / "data" / "stsb-images-longdocs"


def _fixture_texts(folder: Path = LONGDOCS):
    corpus = [json.loads(x) for x in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = {
        (q := json.loads(x))["_id"]: q["text"]
        for x in (folder / "queries.jsonl").read_text().splitlines()
    }
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    qids = [q for q in queries if q in qrels]
    dids = [d["_id"] for d in corpus]
    docs = [(d["title"] + " " + d["text"]).strip() for d in corpus]
    return qids, [queries[q] for q in qids], dids, docs, qrels


def _first_documents(folder: Path, n: int) -> Path:
    """The fixture cut to its first ``n`` documents and the queries judged on them, as a
    BEIR folder in ``folder``: a smaller corpus of the same long documents."""
    lines = (LONGDOCS / "corpus.jsonl").read_text().splitlines()[:n]
    kept = {json.loads(x)["_id"] for x in lines}
    header, *judged = (LONGDOCS / "qrels" / "test.tsv").read_text().splitlines()
    judged = [x for x in judged if x.split("\t")[1] in kept]
    asked = {x.split("\t")[0] for x in judged}
    queries = [x for x in (LONGDOCS / "queries.jsonl").read_text().splitlines()
               if json.loads(x)["_id"] in asked]  # fmt: skip
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    (folder / "qrels" / "test.tsv").write_text("\n".join([header, *judged]) + "\n")
    return folder


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _best_chunk(q: np.ndarray, chunks: list[np.ndarray]) -> np.ndarray:
    """(Q, N) scores: per document, the max cosine of the query over its chunks."""
    return np.stack([(_unit(q) @ _unit(c).T).max(axis=1) for c in chunks], axis=1)


def _trec(qrels, qids, dids, scores: np.ndarray) -> dict[str, float]:
    """nDCG@10, Recall@100, MAP@100 by pytrec_eval; MRR@10 as MTEB computes it (the first
    relevant document of the top 10, ties by the larger id as trec_eval sorts them)."""
    import pytrec_eval

    run = {q: {d: float(s) for d, s in zip(dids, row, strict=True)}
           for q, row in zip(qids, scores, strict=True)}  # fmt: skip
    measures = {"ndcg_cut.10", "recall.100", "map_cut.100"}
    res = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    mrr = []
    for q, row in zip(qids, scores, strict=True):
        # Score, then id, both descending (trec_eval's order of ties: strcmp on docno).
        top = sorted(range(len(dids)), key=lambda j, row=row: (row[j], dids[j]), reverse=True)
        first = next((k for k, j in enumerate(top[:10]) if qrels[q].get(dids[j], 0) > 0), None)
        mrr.append(0.0 if first is None else 1 / (first + 1))
    mean = {m: float(np.mean([v[m] for v in res.values()])) for m in
            ("ndcg_cut_10", "recall_100", "map_cut_100")}  # fmt: skip
    return {"ndcg_at_10": mean["ndcg_cut_10"], "mrr_at_10": float(np.mean(mrr)),
            "recall_at_100": mean["recall_100"], "map_at_100": mean["map_cut_100"]}  # fmt: skip


def test_best_chunk_search_matches_brute_force_with_ties_and_small_blocks(monkeypatch):
    from poolkit.compare import documents
    from poolkit.compare.search import id_order

    rng = np.random.default_rng(0)
    counts = rng.integers(1, 6, size=57)
    # Exact scores on every CPU (see exact_unit_vectors): many ties, each broken by the rule.
    chunks = exact_unit_vectors(rng, int(counts.sum()))
    starts = np.cumsum(counts) - counts
    chunks[starts[5]] = chunks[starts[9]]  # two documents with an equal best chunk
    queries = exact_unit_vectors(rng, 11)
    queries[0] = chunks[starts[9]]
    ids = [f"d{i:03d}" for i in range(len(counts))][::-1]
    monkeypatch.setattr(documents, "_CHUNK_BLOCK", 13)  # many document blocks to merge
    ranked = documents.max_chunk_top_k(queries, chunks, counts, 20, id_order(ids))
    parts = np.split(chunks, np.cumsum(counts)[:-1])
    scores = _best_chunk(queries, parts).astype(np.float32)
    for q in range(len(queries)):
        want = sorted(range(len(counts)), key=lambda j, q=q: (scores[q, j], ids[j]), reverse=True)
        assert ranked[q].tolist() == want[:20]


@pytest.mark.slow
def test_document_rows_match_pytrec_eval_table_json_and_report(tmp_path, minilm):
    pytest.importorskip("pytrec_eval")
    import poolkit as pk

    # One chunk size, one recipe and the first 12 documents: each pass over all 32 long
    # documents costs ~15 CPU-s. Several sizes sharing one late pass:
    # test_late_rows_of_several_sizes_share_...; a table of three sizes on all 32:
    # docs/compare.md's example (tests/test_docs.py).
    data = _first_documents(tmp_path / "docs", 12)
    result = poolkit(
        "compare", "--task", "retrieval", str(data), "--strategies", "mean",
        "--chunk-tokens", "64", "--bootstrap", "200", "--json", "out.json",
        "--report", "r.html", "--quiet", "--explain", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    answer, table = result.stdout.decode().split("\n\n", 1)
    doc = json.loads((tmp_path / "out.json").read_text())
    rows = {(r["recipe"], r["documents"]): r for r in doc["results"]}
    labels = [None, "window", "naive tokens:64", "late tokens:64"]
    assert set(rows) == {("mean", x) for x in labels}

    # The reference for the truncated row: the documents embedded here, pytrec_eval. (The
    # document rows are recomputed below from the `poolkit embed` commands they print,
    # against the same pytrec_eval.)
    qids, queries, dids, docs, qrels = _fixture_texts(data)
    q = pk.embed(queries, minilm)
    with pytest.warns(pk.TruncationWarning):
        truncated = pk.embed(docs, minilm)
    for metric, value in _trec(qrels, qids, dids, _unit(q) @ _unit(truncated).T).items():
        assert rows[("mean", None)][metric] == pytest.approx(value, abs=1e-6), metric
    # Chunking helps on this corpus: the best chunk finds captions past token 254.
    assert rows[("mean", "naive tokens:64")]["ndcg_at_10"] > rows[("mean", None)]["ndcg_at_10"]

    # Every row: intervals and the paired difference to the intended (truncated) row.
    for (recipe, label), r in rows.items():
        assert set(r["ci"]) == {"ndcg_at_10", "mrr_at_10", "recall_at_100", "map_at_100"}
        if (recipe, label) != ("mean", None):
            assert r["difference"]["metric"] == "ndcg_at_10"
            assert isinstance(r["significant"], bool)
    commands = {k: r["embed_command"] for k, r in rows.items()}
    assert commands[("mean", "window")] == (
        f"poolkit embed {data} -o docs.parquet --long-text window --recipe mean"
    )
    assert commands[("mean", "naive tokens:64")] == (
        f"poolkit embed {data} -o chunks.parquet --chunks tokens:64 --recipe mean"
    )
    assert commands[("mean", "late tokens:64")] == (
        f"poolkit embed {data} -o chunks.parquet --chunks tokens:64 --late --recipe mean"
    )
    assert commands[("mean", None)] == (
        f"poolkit embed {data} -o corpus-mean.parquet --recipe mean && "
        f"poolkit embed {data / 'queries.jsonl'} -o queries-mean.parquet --recipe mean"
    )

    # The table: each document row with its intervals and vs * cells, as in the JSON.
    for label in labels[1:]:
        r = rows[("mean", label)]
        line = next(x for x in table.splitlines() if f"mean \u00b7 {label} " in x)
        lo, hi = r["ci"]["ndcg_at_10"]
        assert f"{r['ndcg_at_10']:.4f} [{lo:.4f}, {hi:.4f}]" in line
        assert re.search(
            r"[+\u2212]\d\.\d{4} \[[+\u2212]\d\.\d{4}, [+\u2212]\d\.\d{4}\]\s+(yes|no)$", line
        )
    assert (
        "a document's score for a query is its best chunk's (max cosine over its chunks)" in table
    )
    assert "\u00b7 late tokens:N: the same chunks pooled from the whole document's" in table
    assert "rows without \u00b7: each document one text, cut at the model's max length" in table
    best = doc["results"][0]
    label = best["recipe"] + (f" \u00b7 {best['documents']}" if best["documents"] else "")
    assert f"embed #1 {label}: {best['embed_command']}" in answer.splitlines()
    assert "--chunk-tokens 64" not in result.stderr.decode()  # the hint: only without it

    # Every document row reproduces from the command it prints: the rows `poolkit embed`
    # writes (one per chunk, with its document's row id), each document scored by its best
    # chunk against the * row's query vectors, give the row's figures (pytrec_eval).
    import pyarrow.parquet as pq

    argv = commands[("mean", None)].split(" && ")[1].split()[1:]  # the queries' command
    made = poolkit(*argv, "--quiet", cwd=tmp_path)
    assert made.returncode == 0, made.stderr.decode()
    t = pq.read_table(tmp_path / "queries-mean.parquet").to_pydict()
    q_of = dict(zip(t["id"], t["mean"], strict=True))  # the queries' own ids
    q_cli = np.asarray([q_of[i] for i in qids], np.float32)
    for label in ("window", "naive tokens:64", "late tokens:64"):
        out = "docs.parquet" if label == "window" else f"{label.split()[0]}.parquet"
        argv = commands[("mean", label)].split()[1:]
        argv[argv.index("-o") + 1] = out
        made = poolkit(*argv, "--quiet", cwd=tmp_path)
        assert made.returncode == 0, made.stderr.decode()
        t = pq.read_table(tmp_path / out).to_pydict()
        ids, vecs = np.asarray(t["id"]), np.asarray(t["mean"], np.float32)
        # Each chunk row carries its document's _id; the index stores this many per document.
        assert rows[("mean", label)]["vectors_per_document"] == pytest.approx(len(ids) / len(dids))
        scores = _best_chunk(q_cli, [vecs[ids == i] for i in dids])
        for metric, value in _trec(qrels, qids, dids, scores).items():
            assert rows[("mean", label)][metric] == pytest.approx(value, abs=1e-6), (label, metric)

    # The report: the rows, their commands, and the footer.
    page = (tmp_path / "r.html").read_text()
    assert "mean \u00b7 late tokens:64" in page
    assert f"poolkit embed {data} -o chunks.parquet --chunks tokens:64 --late --recipe mean" in page
    assert f"poolkit embed {data} -o docs.parquet --long-text window --recipe mean" in page
    assert "best chunk&#x27;s (max cosine over its chunks)" in page
    assert "--chunk-tokens 64" in page  # the comparison's own command


def test_late_rows_of_several_sizes_share_one_pass_and_equal_embed_chunks(minilm):
    """The shared late pass (every size's chunks of a document together) gives each size
    the vectors `embed_chunks(late=True)` gives it alone; naive and window rows too."""
    import poolkit as pk
    from poolkit.compare import documents
    from poolkit.compare.runner import Settings

    docs = _fixture_texts()[3][:3]
    settings = Settings("retrieval")
    got = documents.document_vectors(minilm, docs, pk.Recipe("mean"), (64, 128), settings)
    assert set(got) == set(documents.labels((64, 128)))
    for n in (64, 128):
        for late in (False, True):
            want = pk.embed_chunks(docs, f"tokens:{n}", minilm, late=late)
            vectors, counts = got[f"{'late' if late else 'naive'} tokens:{n}"]
            assert counts.tolist() == [len(c.spans) for c in want]
            np.testing.assert_allclose(vectors, np.concatenate([c.vectors for c in want]),
                                       atol=1e-6)  # fmt: skip
    vectors, counts = got["window"]
    assert counts.tolist() == [1, 1, 1]
    np.testing.assert_allclose(vectors, pk.embed(docs, minilm, long_text="window"), atol=1e-6)
    # --long-text window: the strategy rows already are the window row; it is left out.
    settings = Settings("retrieval", long_text="window")
    got = documents.document_vectors(minilm, docs[:1], pk.Recipe("mean"), (128,), settings)
    assert set(got) == {"naive tokens:128", "late tokens:128"}
    assert "no separate window row" in settings.notes[0]


def test_truncated_documents_get_a_note_naming_chunk_tokens(minilm):
    from poolkit.compare.retrieval import read_retrieval
    from poolkit.compare.runner import Settings, compare

    settings = Settings("retrieval", strategies=["mean"], bootstrap=0)
    results = compare(minilm, read_retrieval(LONGDOCS), settings)
    assert [r.name for r in results] == ["mean"]
    assert (
        "32 of 32 documents are longer than the model's 256 tokens and were truncated in every "
        "row; --chunk-tokens 64 128 254 adds rows of whole documents (windows) and chunked "
        "documents."
    ) in settings.notes


def test_chunk_size_past_the_text_room_is_refused_before_any_pass(minilm):
    from poolkit.compare.documents import ChunkError
    from poolkit.compare.retrieval import read_retrieval
    from poolkit.compare.runner import Settings, compare

    settings = Settings("retrieval", strategies=["mean"], chunk_tokens=(128, 255))
    with pytest.raises(ChunkError, match=r"`chunk_tokens` to be a chunk size from 1 to 254 tokens "
                       r"\(the model reads 256, 2 of them special\), but got 255"):  # fmt: skip
        compare(minilm, read_retrieval(LONGDOCS), settings)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--task", "sts", "--chunk-tokens", "128"], ["Expected --chunk-tokens to be given only for --task retrieval"]),
        (["--task", "retrieval", "--chunk-tokens", "0"], ["--chunk-tokens", "at least 1", "got 0"]),
        (["--task", "retrieval", "--chunk-tokens", "128", "-5"], ["--chunk-tokens", "got -5"]),
    ],
)  # fmt: skip
def test_bad_chunk_tokens_one_line_before_the_model(tmp_path, args, fragments):
    data = fixture("stsb-dev-sample.csv") if "sts" in args else LONGDOCS
    result = poolkit("compare", str(data), *args, "--model", "no/such-model", cwd=tmp_path)
    one_error_line(result, 2, *fragments)  # refused before the (missing) model is looked up


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--chunk-tokens", "64", "256"], ["--chunk-tokens", "from 1 to 254 tokens", "got 256",
                                           "e.g. 64 128 254"]),
        (["--chunk-tokens", "128", "--recipes", "cls"], ["--chunk-tokens", "(mean)",
                                                          "Add it to --recipes"]),
    ],
)  # fmt: skip
def test_chunk_tokens_the_model_cannot_take_one_line(tmp_path, args, fragments):
    result = poolkit("compare", str(LONGDOCS), "--task", "retrieval", *args, cwd=tmp_path)
    one_error_line(result, 2, *fragments)
