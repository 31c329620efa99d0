"""`poolkit index` / `poolkit search` (#54, docs/index.md): a Qdrant Edge index of the
committed retrieval fixture returns what `compare` scored (its nDCG@10 by pytrec_eval, the
scores the cosine of poolkit.embed's vectors), fitted recipes with compare's own fit file,
reruns add no duplicate, and what the index cannot hold is refused in one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from test_compare_budget import RETRIEVAL
from testdata import read_beir

import poolkit as pk

pytest.importorskip("qdrant_edge")


def _run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, q0, did, _rank, score, tag = line.split()
        assert q0 == "Q0" and tag == "poolkit"
        run.setdefault(qid, {})[did] = float(score)
    return run


@pytest.mark.slow  # compare, two index builds and two searches of the real model (~40 s)
def test_the_commands_compare_prints_index_what_it_scored(tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    r = poolkit("compare", str(RETRIEVAL), "--task", "retrieval", "--recipes", "mean",
                "mean/pca64", "mean/128/int8", "--bootstrap", "0", "--json", "c.json",
                "--fits-dir", "fits", "--quiet", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    rows = {x["recipe"]: x for x in json.loads((tmp_path / "c.json").read_text())["results"]}
    assert "index_command" not in rows["mean/128/int8"]  # stored int8: not indexed yet
    ids, texts, queries, qrels = read_beir(RETRIEVAL)
    for recipe in ("mean", "mean/pca64"):
        command = rows[recipe]["index_command"]
        for one in command.split(" && "):  # the index, then the search of its queries
            argv = shlex.split(one)
            assert argv[0] == "poolkit" and argv[1] in ("index", "search"), one
            ran = poolkit(*argv[1:], cwd=tmp_path)
            assert ran.returncode == 0, (one, ran.stderr.decode())
        out = tmp_path / shlex.split(command)[-1]
        run = _run(out)
        assert set(run) == set(queries)
        judged = {q: run[q] for q in qrels}
        got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(judged)
        ndcg = float(np.mean([m["ndcg_cut_10"] for m in got.values()]))
        # Exact search: compare's ranking, but for ties within float32 rounding.
        assert ndcg == pytest.approx(rows[recipe]["ndcg_at_10"], abs=1e-3), recipe
    fit = rows["mean/pca64"]["fit"]["file"]
    assert f"--fit {fit}" in rows["mean/pca64"]["index_command"]
    # The scores are the cosine of poolkit.embed's vectors (the fit compare saved applied).
    qids = list(queries)[:5]
    q = pk.embed([queries[x] for x in qids], recipe="mean/pca64", fit=tmp_path / fit)
    d = pk.embed(texts, recipe="mean/pca64", fit=tmp_path / fit)
    cos = q @ d.T  # unit vectors
    run = _run(tmp_path / "run-mean-pca64.tsv")
    for i, qid in enumerate(qids):
        for did, score in run[qid].items():
            assert score == pytest.approx(float(cos[i, ids.index(did)]), abs=1e-5)
    # Indexed again into the same folder (a rerun of a killed job): the same points, no more.
    again = shlex.split(rows["mean/pca64"]["index_command"].split(" && ")[0])
    assert poolkit(*again[1:], cwd=tmp_path).returncode == 0
    from qdrant_edge import CountRequest, EdgeShard

    folder = tmp_path / again[again.index("--to") + 1]
    shard = EdgeShard.load(str(folder / "shard"))
    assert shard.count(CountRequest()) == len(ids)
    shard.close()
    record = json.loads((folder / "poolkit-index.json").read_text())
    assert record["vectors"]["mean/pca64"] == {"recipe": "mean/pca64", "dims": 64}
    assert (folder / record["fits"]["mean/pca64"]["file"]).is_file()


def test_the_library_keeps_the_users_ids_and_fields(tmp_path, minilm_dir):
    from poolkit.index import index_texts, search

    texts = ["a cat sat on the mat", "stocks fell sharply today", "a kitten on a rug",
             "the market dropped"]  # fmt: skip
    ids = ["doc-a", "doc-b", 7, "doc-d"]
    index_texts(tmp_path / "idx", texts, ids, model=minilm_dir, recipe="mean",
                payloads=[{"n": k} for k in range(4)])  # fmt: skip
    (hits,) = search(tmp_path / "idx", ["a cat on a mat"], k=2)
    assert [h[0] for h in hits] == ["doc-a", 7]  # ids as given, their type kept
    v = pk.embed(["a cat on a mat", *texts], minilm_dir, "mean")
    assert hits[0][1] == pytest.approx(float(v[0] @ v[1]), abs=1e-6)
    with pytest.raises(pk.InputError, match="distinct ids"):
        index_texts(tmp_path / "other", texts, ["x", "x", "y", "z"], model=minilm_dir)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--recipe", "splade"], ["--recipe", "a sequence recipe"]),
        (["--recipe", "mean/int8"], ["--recipe", "float32 vectors", "mean"]),
        (["--recipe", "mean/pca8"], ["--fit", "mean/pca8"]),
        (["--recipe", "mean", "--part-size", "0"], ["--part-size"]),
        (["--recipe", "mean", "--query-prompt-name", "query"], ["--query-prompt-name"]),
        (["--recipe", "mean", "--to", "http://localhost:6333"], ["--to", "not supported yet"]),
    ],
)
def test_index_refusals(tmp_path, minilm_dir, argv, fragments):
    (tmp_path / "docs.txt").write_text("one text\nanother text\n")
    r = poolkit("index", "docs.txt", "--to", "idx", "-m", str(minilm_dir), *argv, cwd=tmp_path)
    one_error_line(r, 2, *fragments)
    assert not (tmp_path / "idx" / "shard").exists()


def test_another_model_or_recipe_is_refused_naming_both(tmp_path, minilm_dir, tiny_dirs):
    (tmp_path / "docs.txt").write_text("one text\nanother text\n")
    ok = poolkit("index", "docs.txt", "--to", "idx", "-m", str(minilm_dir), "--recipe", "mean",
                 "-q", cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr.decode()
    r = poolkit("index", "docs.txt", "--to", "idx", "-m", str(minilm_dir), "--recipe", "cls",
                cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, "vectors it was built with", "mean", "cls")
    # More texts without ids: their row numbers would replace the points already there.
    r = poolkit("index", "docs.txt", "--to", "idx", "-m", str(minilm_dir), "--recipe", "mean",
                cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, "--id-column", "would replace its points")
    other = str(next(iter(tiny_dirs.values())))
    r = poolkit("index", "docs.txt", "--to", "idx", "-m", other, "--recipe", "mean", cwd=tmp_path)
    one_error_line(r, 2, "the model it was built with")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    r = poolkit("index", "docs.txt", "--to", "busy", "-m", str(minilm_dir), cwd=tmp_path)
    one_error_line(r, 2, "a new folder or a poolkit index")


def test_search_refusals(tmp_path, minilm_dir):
    (tmp_path / "docs.txt").write_text("one text\nanother text\n")
    ok = poolkit("index", "docs.txt", "--to", "idx", "-m", str(minilm_dir), "--recipe", "mean",
                 "cls", "-q", cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr.decode()
    for argv, fragments in (
        (["idx", "--query", "x"], ["--using", "mean, cls"]),
        (["idx", "--query", "x", "--using", "max"], ["--using", "mean, cls", "'max'"]),
        (["nowhere", "--query", "x"], ["poolkit-index.json"]),
        (["idx", "--query", "x", "--using", "mean", "-o", "run.csv"], ["-o", ".jsonl"]),
        (["idx", "--query", "x", "--using", "mean", "-k", "0"], ["-k"]),
        (["idx", "--query", "x", "--using", "mean", "--text-column", "t"], ["--text-column"]),
    ):
        one_error_line(poolkit("search", *argv, cwd=tmp_path), 2, *fragments)
    out = poolkit("search", "idx", "--query", "one", "--using", "cls", "-o", "r.jsonl",
                  cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    first = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert first["query_id"] == "1" and first["id"] == 0 and first["rank"] == 1


def test_cli_keeps_the_users_ids_and_fields(tmp_path, minilm_dir):
    from qdrant_edge import EdgeShard

    from poolkit.index import point_id

    rows = [{"key": f"k{i}", "body": t, "url": f"https://x/{i}"}
            for i, t in enumerate(["a cat sat on the mat", "stocks fell", "a kitten on a rug"])]  # fmt: skip
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = poolkit("index", "docs.jsonl", "--to", "idx", "-m", str(minilm_dir), "--text-column",
                "body", "--id-column", "key", "--keep-columns", "url", "-q", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and not r.stderr, r.stderr.decode()
    shard = EdgeShard.load(str(tmp_path / "idx" / "shard"))
    (got,) = shard.retrieve([point_id("k2")], with_payload=True, with_vector=False)
    shard.close()
    assert got.payload == {"id": "k2", "keep": {"url": "https://x/2"}}
    out = poolkit("search", "idx", "--query", "a cat on a mat", "-k", "1", cwd=tmp_path)
    assert out.stdout.decode().split()[:4] == ["1", "Q0", "k0", "1"]
