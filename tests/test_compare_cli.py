"""End to end: `poolkit compare` as a subprocess on the real data with the real model.

Every figure is checked against an independent computation: the published STS-B
reference, or a plain `transformers` forward pass (one text at a time, no padding) with
pooling, span lookup and entity scoring written out here, and the same probe protocol
(scikit-learn logistic regression, stratified 5-fold CV with seed 0, or train/test).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from clitools import one_error_line, poolkit
from metric_reference import entity_f1_reference
from scipy.stats import pearsonr, spearmanr
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from testdata import conll_sentences, fixture, full_data, read_sts_pairs

from poolkit.recipe import Recipe

pytestmark = pytest.mark.slow

STS_REFERENCE = {"mean": 86.72, "max": 82.58, "cls": 79.73}  # the data sets' README


@pytest.fixture(scope="module")
def hf(minilm_dir):
    from transformers import AutoModel, AutoTokenizer

    # One text at a time is tiny work: one thread avoids the cost of syncing threads on
    # a busy machine (measured: ~10x slower with 2 threads under load).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield AutoTokenizer.from_pretrained(minilm_dir), AutoModel.from_pretrained(minilm_dir).eval()
    torch.set_num_threads(threads)


def hidden_of(hf, text, **kwargs):
    """One text alone (no padding): float64 last layer (L, H), all layers, and its encoding."""
    tok, model = hf
    enc = tok(text, return_tensors="pt", truncation=True, max_length=256, **kwargs)
    with torch.inference_mode():
        out = model(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            token_type_ids=enc["token_type_ids"],
            output_hidden_states=True,
        )
    layers = [h[0].double().numpy() for h in out.hidden_states]
    return layers[-1], layers, enc


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def probe(x_train, y_train, x_test):
    model = make_pipeline(
        StandardScaler(),
        LogisticRegression(solver="newton-cg", tol=1e-6, max_iter=1000, random_state=0),
    )
    return model.fit(x_train.astype(np.float32), y_train).predict(x_test.astype(np.float32))


def run_json(tmp_path: Path, name: str, *args: str) -> dict:
    result = poolkit("compare", *args, "--json", name, "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads((tmp_path / name).read_text())


def by_key(doc: dict) -> dict[tuple[str, str], dict]:
    return {(r["strategy"], r["layers"]): r for r in doc["results"]}


# embed_command: the command that writes what the row scored (#38).
# model: the row's model as --model names it (several models in one table, #43).
ROW_KEYS = {"model", "intended", "ci", "significant", "difference", "vs_best", "members",
            "tied", "embed_command"}  # fmt: skip


def check_schema(doc: dict, task: str, metric: str, metrics: tuple[str, ...]) -> None:
    # retrieval also says how documents were read (title + text joined, #38) and where the
    # cost columns were measured (#43)
    extra = {"documents_read_as", "costs_measured_on"} if task == "retrieval" else set()
    # and what the token-state cache did (docs/cache.md)
    assert set(doc) == {"task", "model", "metric", "recommended", "bootstrap", "results",
                        "cache", *extra}  # fmt: skip
    assert set(doc["cache"]) == {"enabled", "dir", "layers", "dtype", "texts_read",
                                 "texts_encoded", "read_seconds", "encode_seconds",
                                 "recorded_seconds"}  # fmt: skip
    assert set(doc["recommended"]) == {"metric", "best", "cheapest_tied_bytes",
                                       "cheapest_tied_query"}  # fmt: skip
    assert doc["task"] == task and doc["metric"] == metric
    assert doc["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert doc["bootstrap"]["resamples"] >= 2 and doc["bootstrap"]["level"] == 0.95
    # retrieval rows also say their cost and whether they are on the bytes / query-time
    # frontier (#43)
    front = ({"frontier_bytes", "frontier_query", "bytes_per_document", "index_bytes",
              "query_ms", "encode_ms", "search_ms", "fused_search_ms", "search_growth"}
             if task == "retrieval" else set())  # fmt: skip
    for row in doc["results"]:
        # retrieval on a BEIR folder: a float sequence row's index and search commands
        if "index_command" in row:
            assert task == "retrieval" and row["index_command"].startswith("poolkit index ")
            assert " && poolkit search " in row["index_command"]
        keys = set(row) - {"index_command"}
        assert keys == {"recipe", "strategy", "layers", *metrics, *ROW_KEYS, *front}
        assert Recipe.parse(row["recipe"]).strategy == row["strategy"]
        assert row["model"] == doc["model"]
        # a sequence row's CLI command; word and span rows name the Python call
        assert row["embed_command"].startswith(("poolkit embed ", "poolkit.embed_")), row
        assert set(row["ci"]) == set(metrics)
        for name in metrics:
            lo, hi = row["ci"][name]
            assert lo <= hi  # a percentile interval need not contain the point value
        assert row["members"][0] == row["strategy"]
        if row["intended"] or not any(r["intended"] for r in doc["results"]):
            assert row["significant"] is None and row["difference"] is None
        else:
            d = row["difference"]
            assert d["metric"] == metric and row["significant"] == (
                d["ci"][0] > 0 or d["ci"][1] < 0
            )
    main = [r[metric] for r in doc["results"]]
    assert main == sorted(main, reverse=True)


@pytest.mark.data
def test_sts_matches_the_published_reference(tmp_path):
    result = poolkit(
        "compare", str(full_data("stsb/sts-dev.csv")), "--task", "sts",
        "--json", "sts.json", "--plot", "sts.png", "--quiet", "--explain", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    doc = json.loads((tmp_path / "sts.json").read_text())
    check_schema(doc, "sts", "spearman", ("spearman", "pearson"))
    rows = by_key(doc)
    for strategy, reference in STS_REFERENCE.items():
        assert abs(100 * rows[(strategy, "last")]["spearman"] - reference) <= 0.01, strategy
    # Every sequence strategy is compared; sum, mean and mean_sqrt_len only rescale each
    # vector, so their cosine similarities (and correlations) agree.
    assert {s for s, _ in rows} == {
        "cls", "mean", "max", "min", "weighted_mean", "last", "mean_no_special", "cls+mean",
        "mean+max",
    }  # fmt: skip
    # sum and mean_sqrt_len only rescale each mean vector: one row with the intended mean.
    assert rows[("mean", "last")]["members"] == ["mean", "sum", "mean_sqrt_len"]
    assert [r["strategy"] for r in doc["results"] if r["intended"]] == ["mean"]
    table = result.stdout.decode()
    assert (
        "mean * (= sum, mean_sqrt_len)" in table
        and "* the model's intended pooling (mean, from 1_Pooling/config.json" in table
        and "sig: paired bootstrap test at the 95% level" in table
    )
    first_row = table.split("\n\n", 1)[1].splitlines()[2].split()  # after the answer
    assert first_row[1] == doc["results"][0]["recipe"]
    png = (tmp_path / "sts.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sts.json", "sts.png"]


def test_sts_matches_independent_computation_on_the_committed_sample(tmp_path, hf):
    sample = fixture("stsb-dev-sample.csv")
    doc = run_json(tmp_path, "sts.json", str(sample), "--task", "sts", "--recipes", "cls", "max")
    check_schema(doc, "sts", "spearman", ("spearman", "pearson"))
    rows = by_key(doc)
    pairs = read_sts_pairs(sample)
    gold = [score for score, _, _ in pairs]
    for strategy, pool in (("cls", lambda h: h[0]), ("max", lambda h: h.max(axis=0))):
        cos = []
        for _, a, b in pairs:
            u, v = (pool(hidden_of(hf, text)[0]) for text in (a, b))
            cos.append(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
        assert rows[(strategy, "last")]["spearman"] == pytest.approx(
            spearmanr(cos, gold).statistic, abs=1e-6
        )
        assert rows[(strategy, "last")]["pearson"] == pytest.approx(
            pearsonr(cos, gold).statistic, abs=1e-6
        )


def test_classification_cv_layers_and_determinism(tmp_path, hf):
    lines = fixture("sentiment.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "sst2.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ("sst2.txt", "--task", "classification", "--recipes", "cls", "mean", "--layers")
    doc = run_json(tmp_path, "a.json", *args)
    check_schema(doc, "classification", "accuracy", ("accuracy", "macro_f1"))
    again = run_json(tmp_path, "b.json", *args)  # same command, same JSON: its states read
    assert again.pop("cache")["texts_encoded"] == 0 and doc.pop("cache")["texts_read"] == 0
    assert again == doc

    labels = np.array([line.split(" ", 1)[0] for line in lines])
    texts = [line.split(" ", 1)[1] for line in lines]
    vectors: dict[tuple[str, str], list[np.ndarray]] = {}
    for text in texts:
        _, layers, _ = hidden_of(hf, text)
        for name, h in (("last", layers[-1]), ("last4", np.mean(layers[-4:], axis=0)),
                        ("first_last", (layers[1] + layers[-1]) / 2)):  # fmt: skip
            # The model L2-normalises (its Normalize module), so compare scores unit vectors,
            # exactly what `poolkit embed --recipe` writes for the row.
            vectors.setdefault(("cls", name), []).append(unit(h[0]))
            vectors.setdefault(("mean", name), []).append(unit(h.mean(axis=0)))
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    rows = by_key(doc)
    assert set(rows) == set(vectors)
    for key, vecs in vectors.items():
        x = np.stack(vecs)
        pred = np.empty_like(labels)
        for train, test in folds.split(x, labels):
            pred[test] = probe(x[train], labels[train], x[test])
        # Embeddings agree to float noise, so at most one borderline example may flip.
        assert abs(rows[key]["accuracy"] - accuracy_score(labels, pred)) <= 1 / len(labels) + 1e-12
        assert abs(rows[key]["macro_f1"] - f1_score(labels, pred, average="macro")) <= 0.01
    assert [k for k, r in rows.items() if r["intended"]] == [("mean", "last")]


def _write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> None:
    path.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n")


def test_ner_entity_f1_matches_independent_computation(tmp_path, hf):
    train = conll_sentences(fixture("wnut17-train-sample.conll"))
    dev = conll_sentences(fixture("wnut17-dev-sample.conll"))
    _write_conll(tmp_path / "train.conll", train)
    _write_conll(tmp_path / "dev.conll", dev)
    doc = run_json(
        tmp_path, "ner.json", "dev.conll", "--task", "ner", "--train", "train.conll",
        "--recipes", "word:first", "word:mean",
    )  # fmt: skip
    check_schema(doc, "ner", "entity_f1", ("entity_f1", "token_accuracy"))
    assert not any(r["intended"] for r in doc["results"])

    def word_vectors(sentences):
        out = {"first": [], "mean": []}
        for sentence in sentences:
            h, _, enc = hidden_of(hf, [w for w, _ in sentence], is_split_into_words=True)
            ids = enc.word_ids()
            for k in range(len(sentence)):
                rows = [i for i, w in enumerate(ids) if w == k]
                out["first"].append(h[rows[0]] if rows else np.zeros(h.shape[1]))
                out["mean"].append(h[rows].mean(axis=0) if rows else np.zeros(h.shape[1]))
        return {k: np.stack(v) for k, v in out.items()}

    x_train, x_dev = word_vectors(train), word_vectors(dev)
    y_train = np.array([t for s in train for _, t in s])
    gold = [[t for _, t in s] for s in dev]
    cuts = np.cumsum([len(s) for s in dev])[:-1]
    rows = by_key(doc)
    for strategy in ("first", "mean"):
        flat = probe(x_train[strategy], y_train, x_dev[strategy])
        pred = [list(p) for p in np.split(flat, cuts)]
        expected_f1 = entity_f1_reference(gold, pred)
        expected_acc = np.mean(flat == np.concatenate(gold))
        assert rows[(strategy, "last")]["entity_f1"] == pytest.approx(expected_f1, abs=0.02)
        assert rows[(strategy, "last")]["token_accuracy"] == pytest.approx(
            expected_acc, abs=2 / len(flat)
        )
    assert 0 < rows[("first", "last")]["entity_f1"] < 1


def test_relation_semeval_matches_independent_computation(tmp_path, hf):
    train_lines = fixture("relations-train.txt").read_text(encoding="utf-8").splitlines()
    dev_lines = fixture("relations-dev.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.txt").write_text("\n".join(train_lines) + "\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(dev_lines) + "\n", encoding="utf-8")
    doc = run_json(
        tmp_path, "rel.json", "dev.txt", "--task", "relation", "--train", "train.txt",
        "--recipes", "span:endpoints", "span:mean",
    )  # fmt: skip
    check_schema(doc, "relation", "macro_f1", ("macro_f1", "accuracy"))

    def examples(block):
        out = {"endpoints": [], "mean": []}
        labels = []
        for k in range(0, len(block), 4):
            marked = block[k].split("\t", 1)[1].strip()[1:-1]
            # Independent marker stripping: character positions counted by hand.
            text, spans, pos = "", {}, 0
            while pos < len(marked):
                for tag in ("<e1>", "</e1>", "<e2>", "</e2>"):
                    if marked.startswith(tag, pos):
                        spans[tag] = len(text)
                        pos += len(tag)
                        break
                else:
                    text += marked[pos]
                    pos += 1
            h, _, enc = hidden_of(hf, text, return_offsets_mapping=True)
            offsets = enc["offset_mapping"][0].tolist()
            ends = []
            for e in ("1", "2"):
                s, t = spans[f"<e{e}>"], spans[f"</e{e}>"]
                toks = [i for i, (a, b) in enumerate(offsets) if b > a and b > s and a < t]
                ends.append((toks[0], toks[-1]))
            out["endpoints"].append(np.concatenate([np.r_[h[a], h[b]] for a, b in ends]))
            out["mean"].append(np.concatenate([h[a : b + 1].mean(axis=0) for a, b in ends]))
            labels.append(block[k + 1].strip())
        return {k: np.stack(v) for k, v in out.items()}, np.array(labels)

    x_train, y_train = examples(train_lines)
    x_dev, y_dev = examples(dev_lines)
    rows = by_key(doc)
    for strategy in ("endpoints", "mean"):
        pred = probe(x_train[strategy], y_train, x_dev[strategy])
        row = rows[(strategy, "last")]
        assert row["accuracy"] == pytest.approx(
            accuracy_score(y_dev, pred), abs=1 / len(y_dev) + 1e-12
        )
        assert row["macro_f1"] == pytest.approx(f1_score(y_dev, pred, average="macro"), abs=0.02)


@pytest.mark.parametrize(
    ("args", "files", "fragments"),
    [
        (["all.txt", "--task", "relation"], {}, ["all.txt:501: Expected at least 2 examples of label 'Message-Topic(e1,e2)' for cross-validation, but it has only this one"]),
        (["p.jsonl", "--task", "sts"], {"p.jsonl": '{"sentence1": "a", "score": 1}\n'}, ["Expected --sentence2-column to be a column of the file, but got 'sentence2'. Its columns: sentence1, score."]),
        (["r.jsonl", "--task", "relation"], {"r.jsonl": '{"text": "abc", "spans": [[0, 1], [2, 9]], "label": "x"}\n'}, ["r.jsonl:1: Expected span 2 [2, 9) inside the text of length 3, but it is outside"]),
        (["c.txt", "--task", "classification"], {"c.txt": "1 good film\n0\n"}, ["c.txt:2: Expected `LABEL sentence` (SST-2 format)"]),
        (["n.conll", "--task", "ner"], {"n.conll": "John\tB-PER\n"}, ["Expected --train to be a CoNLL FILE with --task ner"]),
        (["n.conll", "--task", "ner", "--train", "n.conll", "--recipes", "average"], {"n.conll": "John\tB-PER\n"}, ["--recipes to be one of first, last, endpoints, mean, max, but got 'average'"]),
        (["c.txt", "--task", "classification", "--recipes", "mode"], {"c.txt": "1 a\n0 b\n"}, ["--recipes to be one of cls, mean", "but got 'mode'", "Closest valid name: "]),
        (["c.txt", "--task", "classification", "--strategies", "mode"], {"c.txt": "1 a\n0 b\n"}, ["--recipes to be one of cls, mean", "but got 'mode'"]),
        (["c.txt", "--task", "classification", "--recipes", "span:mean"], {"c.txt": "1 a\n0 b\n"}, ["--recipes to be sequence-level recipes, but got 'span:mean' (span level)"]),
        (["c.txt", "--task", "classification", "--layers", "last5"], {"c.txt": "1 a\n0 b\n"}, ["--layers to be one of last, last4, first_last, second_last or indices like -1,-2, but got 'last5'."]),
        (["c.txt", "--task", "classification", "--plot", "x.jpg"], {"c.txt": "1 a\n0 b\n"}, ["Expected --plot to be a .png file name, but got x.jpg"]),
        (["c.txt", "--task", "classification", "--json", "c.txt"], {"c.txt": "1 a\n0 b\n"}, ["Expected --json to be a .json file name, but got c.txt"]),
        (["c.txt", "--task", "classification", "--json", "o.json"], {"c.txt": "1 a\n0 b\n", "o.json": "{}"}, ["--json o.json: file exists; pass --overwrite"]),
        (["b", "--task", "retrieval"], {"b/corpus.jsonl": '{"_id": "d1", "text": "x"}\n', "b/queries.jsonl": '{"_id": "q1", "text": "y"}\n', "b/qrels/test.tsv": "q1\td2\t1\n"}, ["b/qrels/test.tsv:1: Expected a corpus-id of corpus.jsonl, but got 'd2'"]),
        (["b", "--task", "retrieval"], {"b/corpus.jsonl": "", "b/queries.jsonl": "", "b/qrels/test.tsv": ""}, ["b/corpus.jsonl: Expected documents, but the corpus is empty"]),
        (["p.csv", "--task", "retrieval", "--split", "dev"], {"p.csv": "query,document\na,b\n"}, ["Expected --split to be given only for a BEIR folder, but got 'dev'"]),
        (["p.csv", "--task", "retrieval", "--train", "p.csv"], {"p.csv": "query,document\na,b\n"}, ["Expected --train to be given with --task retrieval only for a trained row"]),
        (["c.txt", "--task", "clustering", "--query-column", "q"], {"c.txt": "1 a\n0 b\n"}, ["Expected --query-column to be given only for --task retrieval, but got --task clustering"]),
        (["c.txt", "--task", "clustering"], {"c.txt": "1 a\n1 b\n"}, ["Expected at least two labels for clustering, but there is one"]),
        (["c.txt", "--task", "sts", "--quantize", "int8"], {"c.txt": "1 a\n0 b\n"}, ["Expected --backend to be onnx with --quantize int8, but got torch. Add --backend onnx."]),
        (["c.txt", "--task", "sts", "--backend", "onnx", "--layers"], {"c.txt": "1 a\n0 b\n"}, ["Expected --layers to be unset on the onnx backend (it returns the last layer only)"]),
        (["c.txt", "--task", "sts", "--int8-rows", "all"], {"c.txt": "1 a\n0 b\n"}, ["Expected --int8-rows to be given only with --backend onnx --quantize int8"]),
        (["c.txt", "--task", "sts", "--bootstrap", "-1"], {"c.txt": "1 a\n0 b\n"}, ["Expected --bootstrap to be 0 (off) or at least 2, but got -1"]),
    ],
)  # fmt: skip
def test_input_errors_are_one_line_with_status_2(tmp_path, args, files, fragments):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    if "all.txt" in args:
        # the committed fixture plus one example whose label occurs nowhere else (line 501)
        lines = fixture("relations-train.txt").read_text(encoding="utf-8")
        extra = '9999\t"The <e1>memo</e1> is about the <e2>merger</e2>."\nMessage-Topic(e1,e2)\n'
        (tmp_path / "all.txt").write_text(lines + extra + "Comment:\n\n", encoding="utf-8")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    one_error_line(poolkit("compare", *args, cwd=tmp_path), 2, *fragments)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # nothing written
