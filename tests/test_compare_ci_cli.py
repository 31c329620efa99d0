"""End to end, all six tasks: `poolkit compare --json` on real data, its main
metric and one bootstrap interval checked against an independent computation.

The reference embeds each text alone with plain `transformers` (no padding, pooling written
out here), scores with scipy / scikit-learn / pytrec_eval / the conlleval-style reference,
and computes the interval by materialising the documented resamples
(``numpy.random.default_rng(seed).integers(0, n, (resamples, n))``) and scoring each one.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import clitools
import numpy as np
import pytest
from metric_reference import entity_f1_reference
from scipy import stats
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import accuracy_score, f1_score, v_measure_score
from sklearn.model_selection import StratifiedKFold
from test_compare_cli import (
    _write_conll,
    by_key,
    check_schema,
    hidden_of,
    probe,
    run_json,
)
from testdata import conll_sentences, fixture, full_data, read_sts_pairs

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "data"


@pytest.fixture(scope="module")
def hf(minilm_dir):
    """Tokenizer and model of plain `transformers`, one thread (one text at a time)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield AutoTokenizer.from_pretrained(minilm_dir), AutoModel.from_pretrained(minilm_dir).eval()
    torch.set_num_threads(threads)


def reference_interval(n: int, statistic, resamples: int, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of ``statistic(idx)`` over the documented resamples."""
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    values = np.array([statistic(i) for i in idx])
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("nd,nd->n", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def pooled(hf, texts: list[str]) -> dict[str, np.ndarray]:
    """``mean`` and ``cls`` vectors (float64) of each text, embedded alone, L2-normalised:
    the model's Normalize module says so, and compare scores what ``embed --recipe`` writes."""
    out = {"mean": [], "cls": []}
    for text in texts:
        h, _, _ = hidden_of(hf, text)
        for name, v in (("mean", h.mean(axis=0)), ("cls", h[0])):
            out[name].append(v / np.linalg.norm(v))
    return {k: np.stack(v) for k, v in out.items()}


def test_sts_metric_interval_and_paired_test(tmp_path, hf):
    sample = fixture("stsb-dev-sample.csv")  # real STS-B dev pairs, committed
    doc = run_json(tmp_path, "s.json", str(sample), "--task", "sts", "--strategies", "mean",
                   "cls", "--seed", "3")  # fmt: skip
    check_schema(doc, "sts", "spearman", ("spearman", "pearson"))
    pairs = read_sts_pairs(sample)
    gold = np.array([score for score, _, _ in pairs])
    vec1, vec2 = pooled(hf, [a for _, a, _ in pairs]), pooled(hf, [b for _, _, b in pairs])
    cos = {k: cosine(vec1[k], vec2[k]) for k in ("mean", "cls")}
    rows = by_key(doc)
    for k in ("mean", "cls"):
        assert rows[(k, "last")]["spearman"] == pytest.approx(
            stats.spearmanr(cos[k], gold).statistic, abs=1e-6
        )

    def rho(k):
        return lambda i: stats.spearmanr(cos[k][i], gold[i]).statistic

    n = len(gold)
    assert rows[("cls", "last")]["ci"]["spearman"] == pytest.approx(
        reference_interval(n, rho("cls"), 1000, seed=3), abs=1e-9
    )
    diff = reference_interval(n, lambda i: rho("cls")(i) - rho("mean")(i), 1000, seed=3)
    assert rows[("cls", "last")]["difference"]["ci"] == pytest.approx(diff, abs=1e-9)
    assert rows[("cls", "last")]["significant"] == (diff[0] > 0 or diff[1] < 0)


@pytest.mark.data
def test_classification_metric_and_interval_over_out_of_fold_predictions(tmp_path, hf):
    lines = full_data("sst2/stsa.binary.dev").read_text(encoding="utf-8").splitlines()[4::8]
    (tmp_path / "sst2.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = run_json(tmp_path, "c.json", "sst2.txt", "--task", "classification",
                   "--strategies", "mean", "--bootstrap", "500")  # fmt: skip
    check_schema(doc, "classification", "accuracy", ("accuracy", "macro_f1"))
    labels = np.array([line.split(" ", 1)[0] for line in lines])
    x = pooled(hf, [line.split(" ", 1)[1] for line in lines])["mean"]
    pred = np.empty_like(labels)
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(x, labels):
        pred[test] = probe(x[train], labels[train], x[test])
    row = by_key(doc)[("mean", "last")]
    assert row["accuracy"] == pytest.approx(accuracy_score(labels, pred), abs=1e-6)
    expected = reference_interval(
        len(labels), lambda i: f1_score(labels[i], pred[i], average="macro"), 500
    )
    assert row["ci"]["macro_f1"] == pytest.approx(expected, abs=1e-9)


def test_ner_metric_and_interval_over_sentences(tmp_path, hf):
    train = conll_sentences(fixture("wnut17-train-sample.conll"))  # real WNUT-17, committed
    dev = conll_sentences(fixture("wnut17-dev-sample.conll"))
    _write_conll(tmp_path / "train.conll", train)
    _write_conll(tmp_path / "dev.conll", dev)
    doc = run_json(tmp_path, "n.json", "dev.conll", "--task", "ner", "--train", "train.conll",
                   "--strategies", "first", "--bootstrap", "400")  # fmt: skip
    check_schema(doc, "ner", "entity_f1", ("entity_f1", "token_accuracy"))

    def first_vectors(sentences):
        out = []
        for sentence in sentences:
            h, _, enc = hidden_of(hf, [w for w, _ in sentence], is_split_into_words=True)
            ids = enc.word_ids()
            for k in range(len(sentence)):
                rows = [i for i, w in enumerate(ids) if w == k]
                out.append(h[rows[0]] if rows else np.zeros(h.shape[1]))
        return np.stack(out)

    flat = probe(first_vectors(train), np.array([t for s in train for _, t in s]),
                 first_vectors(dev))  # fmt: skip
    cuts = np.cumsum([len(s) for s in dev])[:-1]
    pred = [list(p) for p in np.split(flat, cuts)]
    gold = [[t for _, t in s] for s in dev]
    row = by_key(doc)[("first", "last")]
    assert row["entity_f1"] == pytest.approx(entity_f1_reference(gold, pred), abs=1e-6)
    expected = reference_interval(
        len(gold), lambda i: entity_f1_reference([gold[j] for j in i], [pred[j] for j in i]), 400
    )
    assert row["ci"]["entity_f1"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.data
def test_relation_metric_and_interval(tmp_path, hf):
    lines = full_data("semeval2010_task8/TRAIN_FILE.TXT").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:600]) + "\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(lines[600:840]) + "\n", encoding="utf-8")
    doc = run_json(tmp_path, "r.json", "dev.txt", "--task", "relation", "--train", "train.txt",
                   "--strategies", "mean", "--bootstrap", "500")  # fmt: skip
    check_schema(doc, "relation", "macro_f1", ("macro_f1", "accuracy"))

    def examples(block):
        vecs, labels = [], []
        for k in range(0, len(block), 4):
            marked = block[k].split("\t", 1)[1].strip()[1:-1]
            text, spans, pos = "", {}, 0
            while pos < len(marked):  # marker stripping by hand
                tag = next((t for t in ("<e1>", "</e1>", "<e2>", "</e2>")
                            if marked.startswith(t, pos)), None)  # fmt: skip
                if tag:
                    spans[tag] = len(text)
                    pos += len(tag)
                else:
                    text += marked[pos]
                    pos += 1
            h, _, enc = hidden_of(hf, text, return_offsets_mapping=True)
            offsets = enc["offset_mapping"][0].tolist()
            parts = []
            for e in ("1", "2"):
                s, t = spans[f"<e{e}>"], spans[f"</e{e}>"]
                toks = [i for i, (a, b) in enumerate(offsets) if b > a and b > s and a < t]
                parts.append(h[toks[0] : toks[-1] + 1].mean(axis=0))
            vecs.append(np.concatenate(parts))
            labels.append(block[k + 1].strip())
        return np.stack(vecs), np.array(labels)

    x_train, y_train = examples(lines[:600])
    x_dev, y_dev = examples(lines[600:840])
    pred = probe(x_train, y_train, x_dev)
    row = by_key(doc)[("mean", "last")]
    assert row["macro_f1"] == pytest.approx(f1_score(y_dev, pred, average="macro"), abs=1e-6)
    expected = reference_interval(len(y_dev), lambda i: accuracy_score(y_dev[i], pred[i]), 500)
    assert row["ci"]["accuracy"] == pytest.approx(expected, abs=1e-9)


def beir_fixture(folder: Path):
    """``(corpus texts, query texts, qids, doc ids, qrels)`` of a BEIR folder, as compare
    reads it: a document is its title and text joined by a space."""
    import json

    corpus = [json.loads(x) for x in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open())}
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels/test.tsv").open() as f:
        for q, d, s in list(csv.reader(f, delimiter="\t"))[1:]:
            qrels.setdefault(q, {})[d] = int(s)
    qids = list(qrels)
    docs = [(d["title"] + " " + d["text"]).strip() for d in corpus]
    return docs, [queries[q] for q in qids], qids, [d["_id"] for d in corpus], qrels


def ndcg_per_query(beir, qvec: np.ndarray, dvec: np.ndarray) -> np.ndarray:
    """nDCG@10 of each query by pytrec_eval, ranking documents by cosine."""
    import pytrec_eval

    _, _, qids, dids, qrels = beir
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    sims = unit(qvec.astype(np.float64)) @ unit(dvec.astype(np.float64)).T
    run = {q: {d: float(sims[i, j]) for j, d in enumerate(dids)} for i, q in enumerate(qids)}
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return np.array([per[q]["ndcg_cut_10"] for q in qids])


def test_retrieval_beir_fixture_against_pytrec_eval(tmp_path, hf):
    pytest.importorskip("pytrec_eval")
    folder = FIXTURES / "stsb-images-retrieval"
    doc = run_json(tmp_path, "q.json", str(folder), "--task", "retrieval",
                   "--strategies", "mean", "cls")  # fmt: skip
    check_schema(doc, "retrieval", "ndcg_at_10",
                 ("ndcg_at_10", "mrr_at_10", "recall_at_100", "map_at_100"))  # fmt: skip
    beir = beir_fixture(folder)
    docs, qvec = pooled(hf, beir[0]), pooled(hf, beir[1])
    rows = by_key(doc)
    for k in ("mean", "cls"):
        ndcg = ndcg_per_query(beir, qvec[k], docs[k])
        assert rows[(k, "last")]["ndcg_at_10"] == pytest.approx(ndcg.mean(), abs=1e-6)
        expected = reference_interval(len(ndcg), lambda i, v=ndcg: v[i].mean(), 1000)
        assert rows[(k, "last")]["ci"]["ndcg_at_10"] == pytest.approx(expected, abs=1e-9)


def test_clustering_fixture_mteb_protocol(tmp_path, hf):
    path = FIXTURES / "wnut17-entity-type-clustering.csv"
    doc = run_json(tmp_path, "k.json", str(path), "--task", "clustering",
                   "--strategies", "mean", "--bootstrap", "300")  # fmt: skip
    check_schema(doc, "clustering", "v_measure", ("v_measure",))
    with path.open(encoding="utf-8", newline="") as f:
        records = list(csv.DictReader(f))
    labels = np.unique([r["label"] for r in records], return_inverse=True)[1]
    x = pooled(hf, [r["text"] for r in records])["mean"].astype(np.float32)
    runs = [
        MiniBatchKMeans(n_clusters=4, batch_size=500, n_init="auto", random_state=s).fit(x).labels_
        for s in range(5)
    ]
    row = by_key(doc)[("mean", "last")]
    expected = np.mean([v_measure_score(labels, c) for c in runs])
    assert row["v_measure"] == pytest.approx(expected, abs=1e-6)
    interval = reference_interval(
        len(labels), lambda i: np.mean([v_measure_score(labels[i], c[i]) for c in runs]), 300
    )
    assert row["ci"]["v_measure"] == pytest.approx(interval, abs=1e-9)


def test_int8_rows_beside_fp32_with_paired_difference_and_speed(tmp_path, monkeypatch, minilm_dir):
    import json

    # The exports go to a fresh cache: the test builds and checks them like a new user.
    env = {**os.environ, "POOLKIT_CACHE": str(tmp_path / "cache")}
    folder = FIXTURES / "stsb-images-retrieval"
    result = clitools.poolkit(
        "compare", str(folder), "--task", "retrieval", "--strategies", "mean", "cls",
        "--backend", "onnx", "--quantize", "int8", "--json", "q.json", "--quiet",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    doc = json.loads((tmp_path / "q.json").read_text())
    rows = {(r["strategy"], r["quantize"]): r for r in doc["results"]}
    assert set(rows) == {("mean", None), ("cls", None), ("mean", "int8")}  # intended only
    fp32, int8 = rows[("mean", None)], rows[("mean", "int8")]
    assert fp32["backend"] == int8["backend"] == "onnx" and fp32["intended"]
    assert not int8["intended"] and int8["members"] == ["mean"]
    diff = int8["vs_fp32"]
    assert diff["metric"] == "ndcg_at_10"
    assert diff["value"] == pytest.approx(int8["ndcg_at_10"] - fp32["ndcg_at_10"], abs=1e-12)
    assert int8["difference"] == diff  # the intended row is the fp32 twin
    # The paired interval, recomputed: both rows' vectors from the library on the same cached
    # exports (dynamic int8 scales each batch by its own range, and embed batches texts as
    # compare does), per-query nDCG@10 by pytrec_eval, the documented resamples.
    import poolkit
    from poolkit.encoder import Encoder

    beir = beir_fixture(folder)
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    per_query = {}
    for key, quantize in (("fp32", None), ("int8", "int8")):
        encoder = Encoder(minilm_dir, backend="onnx", quantize=quantize)
        q, d = (poolkit.embed(t, encoder, "mean") for t in (beir[1], beir[0]))
        per_query[key] = ndcg_per_query(beir, q, d)
    assert int8["ndcg_at_10"] == pytest.approx(per_query["int8"].mean(), abs=1e-6)
    paired = per_query["int8"] - per_query["fp32"]
    assert diff["ci"] == pytest.approx(
        reference_interval(len(paired), lambda i: paired[i].mean(), 1000), abs=1e-6
    )
    # The speedup is the fp32 twin's encoding time over the int8 row's, both in the JSON.
    assert fp32["encode_seconds"] > 0 and int8["encode_seconds"] > 0
    assert int8["speedup"] == pytest.approx(fp32["encode_seconds"] / int8["encode_seconds"])
    assert fp32["vs_fp32"] is None and fp32["speedup"] is None
    # Priced like every row: the int8 model stores float32 vectors (the fp32 row's bytes,
    # search and growth) and its times are its own (its query pass and search timed apart).
    assert int8["bytes_per_document"] == fp32["bytes_per_document"] == 384 * 4
    assert int8["search_growth"] == fp32["search_growth"]
    assert int8["query_ms"] > 0 and int8["search_ms"] > 0
    assert int8["encode_ms"] != fp32["encode_ms"] and int8["search_ms"] != fp32["search_ms"]
    # The fp32 ONNX row agrees with the torch run of the same recipe (same model, fp32).
    torch_doc = run_json(tmp_path, "t.json", str(folder), "--task", "retrieval",
                         "--strategies", "mean", "cls", "--bootstrap", "0")  # fmt: skip
    assert by_key(torch_doc)[("mean", "last")]["ndcg_at_10"] == pytest.approx(
        fp32["ndcg_at_10"], abs=1e-3
    )
    assert "backend" not in torch_doc["results"][0] and torch_doc["bootstrap"] is None
    table = result.stdout.decode()
    assert "onnx int8" in table and f"{int8['speedup']:.1f}x faster" in table
