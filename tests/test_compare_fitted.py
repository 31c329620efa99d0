"""`poolkit compare` fitted rows (#53, docs/fitted.md): mean/pca128, mean/whiten128 and
mean/abtt3 on the committed retrieval fixture against an independent reference
(sentence-transformers' vectors, scikit-learn's PCA or the BERT-whitening paper's numpy
recipe fitted on the same documents, ranked here and scored by pytrec_eval); the fit reads
no query, no qrel and no test pair (changing them leaves the fit file byte-identical);
what may be fitted on is refused in one line before the model loads."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from test_compare_budget import RETRIEVAL, _retrieval_reference, _trec, by_recipe
from testdata import fixture, read_beir

PCA = pytest.importorskip("sklearn.decomposition").PCA


def _compare(tmp_path: Path, data: Path | str, *args: str) -> dict:
    r = poolkit("compare", str(data), *args, "--json", "out.json", "--quiet", "--overwrite",
                "--fits-dir", "fits", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    return json.loads((tmp_path / "out.json").read_text())


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.slow  # the real model's compare and sentence-transformers' vectors (~20 s)
def test_fitted_retrieval_rows_equal_scikit_learn_on_the_documents(tmp_path, minilm_st):
    pytest.importorskip("pytrec_eval")
    doc = _compare(tmp_path, RETRIEVAL, "--task", "retrieval", "--recipes", "mean", "mean/128",
                   "mean/pca128", "mean/whiten128", "mean/abtt3", "--bootstrap", "200")  # fmt: skip
    rows = by_recipe(doc)
    qids, dids, qrels, q, d = _retrieval_reference(minilm_st)  # unit vectors (Normalize)
    q64, d64 = q.astype(np.float64), d.astype(np.float64)
    pca = PCA(128, svd_solver="full").fit(d64)  # fitted on the documents only
    u, s, _ = np.linalg.svd(np.cov(d64.T))  # Su et al. 2021, on the documents
    white = u[:, :128] / np.sqrt(s[:128])
    top = PCA(3, svd_solver="full").fit(d64).components_

    def abtt(x):
        c = x - d64.mean(axis=0)
        return c - (c @ top.T) @ top

    references = {
        "mean/pca128": _unit(pca.transform(q64)) @ _unit(pca.transform(d64)).T,
        "mean/whiten128": _unit((q64 - d64.mean(0)) @ white) @ _unit((d64 - d64.mean(0)) @ white).T,
        "mean/abtt3": _unit(abtt(q64)) @ _unit(abtt(d64)).T,
    }  # fmt: skip
    for recipe, scores in references.items():
        row = rows[(recipe, False)]
        for metric, measure in (("ndcg_at_10", "ndcg_cut_10"), ("map_at_100", "map_cut_100")):
            assert row[metric] == pytest.approx(_trec(qrels, qids, dids, scores, measure),
                                                abs=1e-3), (recipe, metric)  # fmt: skip
        fit = row["fit"]
        assert fit["on"] == f"{len(dids)} documents" and fit["transform"] == recipe[5:]
        assert Path(tmp_path / fit["file"]).is_file() and fit["seconds"] >= 0
        assert f"--fit {fit['file']}" in row["embed_command"]
        assert row["ci"] and row["difference"] is not None  # paired against mean, with a CI
    # Beside truncation at the same bytes: both 128 dimensions, 512 bytes.
    assert rows[("mean/pca128", False)]["bytes_per_vector"] == 512
    assert rows[("mean/128", False)]["bytes_per_vector"] == 512
    assert rows[("mean/abtt3", False)]["bytes_per_vector"] == 1536


def _retrieval_copy(root: Path, name: str) -> Path:
    out = root / name
    shutil.copytree(RETRIEVAL, out)
    return out


@pytest.mark.slow  # four compares of the real model, the states cached (~25 s)
def test_the_fit_reads_no_query_no_qrel_no_test_pair(tmp_path):
    a = _retrieval_copy(tmp_path, "a")
    b = _retrieval_copy(tmp_path, "b")
    queries = [json.loads(x) for x in (b / "queries.jsonl").read_text().splitlines()]
    (b / "queries.jsonl").write_text("".join(
        json.dumps({**q, "text": " ".join(reversed(q["text"].split()))}) + "\n"
        for q in queries))  # fmt: skip
    qrels = (b / "qrels" / "test.tsv").read_text().splitlines()
    (b / "qrels" / "test.tsv").write_text("\n".join(qrels[: len(qrels) // 2]) + "\n")
    files = []
    for folder in (a, b):
        doc = _compare(tmp_path, folder, "--task", "retrieval", "--recipes", "mean",
                       "mean/pca64", "--bootstrap", "0")  # fmt: skip
        files.append(tmp_path / by_recipe(doc)[("mean/pca64", False)]["fit"]["file"])
    assert files[0] == files[1]  # the same fit: the same digest, the same name
    assert files[0].read_bytes() == files[1].read_bytes()
    # STS: the fit is made on --train's sentences; its scores and the test pairs unread.
    rows = list(csv.reader(fixture("stsb-dev-sample.csv").open(), delimiter="\t"))
    train, test = rows[:100], rows[100:]
    changed_scores = [[*r[:4], f"{5 - float(r[4]):.1f}", *r[5:]] for r in train]
    other_test = [[*r[:5], r[6], r[5]] for r in test]
    sts_files = []
    for name, tr, te in (("one", train, test), ("two", changed_scores, other_test)):
        work = tmp_path / name  # the same file names: the fit file records its source's
        work.mkdir()
        for part, body in (("train", tr), ("test", te)):
            with (work / f"{part}.tsv").open("w", newline="") as f:
                csv.writer(f, delimiter="\t").writerows(body)
        doc = _compare(work, "test.tsv", "--task", "sts", "--train", "train.tsv", "--recipes",
                       "mean", "mean/whiten32", "--bootstrap", "0")  # fmt: skip
        row = by_recipe(doc)[("mean/whiten32", False)]
        assert row["fit"]["on"].endswith("distinct sentences of train.tsv")
        sts_files.append((work / row["fit"]["file"]).read_bytes())
    assert sts_files[0] == sts_files[1]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--task", "sts", "--recipes", "mean", "mean/pca8"],
         ["--recipes", "neither --fit nor --train"]),
        (["--task", "sts", "--recipes", "mean", "mean/pca8", "--fit", "DATA"],
         ["--fit", "texts other than those scored"]),
        (["--task", "sts", "--recipes", "mean", "--fit", "fit.txt"],
         ["--fit", "given only with a fitted recipe"]),
        (["--task", "sts", "--recipes", "mean", "--fits-dir", "x"],
         ["--fits-dir", "given only with a fitted recipe"]),
        (["--task", "classification", "--recipes", "mean", "mean/pca8"],
         ["--recipes", "without an output stage (/TRANSFORM"]),
        (["--task", "sts", "--recipes", "mean", "mean/pca8", "--fit", "empty.txt"],
         ["--fit", "non-blank texts"]),
    ],
)  # fmt: skip
def test_what_may_be_fitted_on_is_checked_before_the_model(tmp_path, args, fragments):
    data = tmp_path / "pairs.tsv"
    shutil.copy(fixture("stsb-dev-sample.csv"), data)
    (tmp_path / "fit.txt").write_text("a text\n")
    (tmp_path / "empty.txt").write_text("\n\n")
    if args[1] == "classification":
        data = fixture("sentiment.txt")
    argv = [str(data) if a == "DATA" else a for a in args]
    r = poolkit("compare", str(data), *argv, "--model", "/nonexistent/model", cwd=tmp_path)
    one_error_line(r, 2, *fragments)


@pytest.mark.slow  # two compares of the real model on the committed STS sample (~15 s)
def test_a_trained_projection_row_is_seeded_and_is_its_fit_applied(tmp_path, minilm_st):
    from scipy.stats import spearmanr

    from poolkit.fitted import load_fit

    rows = list(csv.reader(fixture("stsb-dev-sample.csv").open(), delimiter="\t"))
    for part, body in (("train", rows[:100]), ("test", rows[100:])):
        with (tmp_path / f"{part}.tsv").open("w", newline="") as f:
            csv.writer(f, delimiter="\t").writerows(body)
    runs = []
    for _ in range(2):
        doc = _compare(tmp_path, "test.tsv", "--task", "sts", "--train", "train.tsv",
                       "--recipes", "mean", "mean/proj32", "--bootstrap", "100", "--seed", "3")  # fmt: skip
        runs.append(by_recipe(doc)[("mean/proj32", False)])
    first, second = runs
    assert first["spearman"] == second["spearman"] and first["ci"] == second["ci"]
    assert first["fit"]["file"] == second["fit"]["file"]  # the same weights, the same digest
    assert first["fit"]["on"].startswith("90 pairs (10 held out) of train.tsv")
    fit = load_fit(tmp_path / first["fit"]["file"])
    assert fit.transform == "proj32" and fit.extra["seed"] == "3" and fit.extra["loss"] == "cosent"
    # The row is the fit applied to sentence-transformers' vectors of the test pairs.
    test = rows[100:]
    a = minilm_st.encode([r[5] for r in test], convert_to_numpy=True)
    b = minilm_st.encode([r[6] for r in test], convert_to_numpy=True)
    pa, pb = fit.apply(a).astype(np.float64), fit.apply(b).astype(np.float64)
    cos = (pa * pb).sum(1) / np.linalg.norm(pa, axis=1) / np.linalg.norm(pb, axis=1)
    gold = [float(r[4]) for r in test]
    assert first["spearman"] == pytest.approx(spearmanr(cos, gold).statistic, abs=1e-6)
    assert "--fit" in first["embed_command"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--task", "sts", "--recipes", "mean", "mean/proj8"], ["--train", "labelled pairs"]),
        (["--task", "sts", "--recipes", "mean", "mean/proj8", "--train", "DATA", "--fit",
          "fit.txt"], ["--fit", "without --fit"]),
        (["--task", "retrieval", "--recipes", "mean", "mean/proj8"], ["--train", "no --train"]),
        (["--task", "classification", "--recipes", "mean", "mean/proj8"],
         ["--recipes", "without an output stage"]),
    ],
)  # fmt: skip
def test_trained_rows_need_labelled_pairs(tmp_path, args, fragments):
    data = tmp_path / "pairs.tsv"
    shutil.copy(fixture("stsb-dev-sample.csv"), data)
    (tmp_path / "fit.txt").write_text("a text\n")
    if args[1] == "retrieval":
        data = RETRIEVAL
    if args[1] == "classification":
        data = fixture("sentiment.txt")
    argv = [str(tmp_path / "pairs2.tsv") if a == "DATA" else a for a in args]
    shutil.copy(fixture("stsb-dev-sample.csv"), tmp_path / "pairs2.tsv")
    r = poolkit("compare", str(data), *argv, "--model", "/nonexistent/model", cwd=tmp_path)
    one_error_line(r, 2, *fragments)


def test_a_projection_is_trained_not_fitted():
    from poolkit.fitted import FitError, fit_transform

    with pytest.raises(FitError, match="trained on labels"):
        fit_transform(np.zeros((50, 8), np.float32), "proj4", recipe="mean/proj4")


def _split_beir(root: Path) -> Path:
    """The retrieval fixture with its judged queries split in two: the first half's
    judgements as qrels/train.tsv, the rest as qrels/test.tsv."""
    beir = _retrieval_copy(root, "split")
    head, *body = (beir / "qrels" / "test.tsv").read_text().splitlines()
    queries = sorted({line.split("\t")[0] for line in body})
    train = set(queries[: len(queries) // 2])
    for name, keep in (("train", True), ("test", False)):
        lines = [x for x in body if (x.split("\t")[0] in train) == keep]
        (beir / "qrels" / f"{name}.tsv").write_text("\n".join([head, *lines]) + "\n")
    return beir


@pytest.mark.slow  # the real model's compare and sentence-transformers' vectors (~20 s)
def test_a_retrieval_projection_trains_on_the_train_split(tmp_path, minilm_st):
    pytest.importorskip("pytrec_eval")
    from poolkit.fitted import load_fit

    beir = _split_beir(tmp_path)
    doc = _compare(tmp_path, beir, "--task", "retrieval", "--train", "train", "--recipes",
                   "mean", "mean/proj64", "--bootstrap", "0", "--seed", "2")  # fmt: skip
    row = by_recipe(doc)[("mean/proj64", False)]
    assert "train queries" in row["fit"]["on"] and "held out" in row["fit"]["on"]
    fit = load_fit(tmp_path / row["fit"]["file"])
    assert fit.extra["loss"] == "infonce" and fit.extra["seed"] == "2"
    # The row is the fit applied to sentence-transformers' vectors of the test queries.
    dids, texts, queries, qrels = read_beir(beir)
    qids = [q for q in queries if q in qrels]
    q = fit.apply(minilm_st.encode([queries[x] for x in qids])).astype(np.float64)
    d = fit.apply(minilm_st.encode(texts))
    scores = _unit(q) @ _unit(d.astype(np.float64)).T
    assert row["ndcg_at_10"] == pytest.approx(_trec(qrels, qids, dids, scores, "ndcg_cut_10"),
                                              abs=1e-3)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "args", "fragments"),
    [
        ("split", ["--train", "test", "--recipes", "mean", "mean/proj8"],
         ["--train", "none of which is scored"]),
        ("split", ["--train", "train", "--recipes", "mean"],
         ["--train", "only for a trained row"]),
        ("table", ["--train", "train", "--recipes", "mean", "mean/proj8"],
         ["--train", "a qrels split of a BEIR folder"]),
        ("split", ["--train", "nope", "--recipes", "mean", "mean/proj8"], ["split", "train"]),
    ],
)  # fmt: skip
def test_a_retrieval_train_split_is_checked_before_the_model(tmp_path, data, args, fragments):
    if data == "split":
        source = _split_beir(tmp_path)
    else:
        source = tmp_path / "pairs.jsonl"
        source.write_text(json.dumps({"query": "a", "document": "b"}) + "\n")
    r = poolkit("compare", str(source), "--task", "retrieval", *args, "--model",
                "/nonexistent/model", cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, *fragments)
