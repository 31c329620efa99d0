"""A family of another package (tests/family_plugins.py: ``poolkit-hashbag``, installed as
an installer leaves it) plugs in through the entry-point group ``poolkit.families``: its
recipe level parses and round-trips, and ``poolkit.embed`` and ``poolkit embed`` run its
plan, with no edit under src/. The reference counts the ids of the ``tokenizers`` library's
own tokenizer of the model folder (not poolkit's) into the 64 buckets by hand.
"""

from __future__ import annotations

import clitools
import numpy as np
import pyarrow.parquet as pq
import pytest
from family_plugins import forget_family, write_family

import poolkit

TEXTS = ["A man is playing a guitar.", "Two dogs run on the beach!", "Hello"]


@pytest.fixture
def hashbag(tmp_path_factory, monkeypatch):
    """poolkit-hashbag installed (its folder first on sys.path), loaded afresh."""
    folder = write_family(tmp_path_factory.mktemp("family"))
    monkeypatch.syspath_prepend(str(folder))
    forget_family()
    yield folder
    forget_family()


def by_hand(model_dir, texts, *, drop_special: bool, dtype=np.float64) -> np.ndarray:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()  # the file pads to 128: the ids of the text alone
    special = {tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]")}
    out = np.zeros((len(texts), 64), dtype)
    for row, text in enumerate(texts):
        for i in tok.encode(text).ids:
            if not (drop_special and i in special):
                out[row, i % 64] += 1
    return out / np.linalg.norm(out, axis=1, keepdims=True)  # in float32 as the plugin does


def test_without_the_plugin_the_level_is_unknown():
    forget_family()
    with pytest.raises(poolkit.RecipeError, match="hashed"):
        poolkit.Recipe.parse("hashed:ids")


def test_built_in_names_never_read_the_entry_points(hashbag):
    """Plugins load where a name is not known, not on every parse (reading the installed
    packages' entry points costs about 0.1 s): built-in names and their segments leave them
    unread; the plugin's name reads them (as a refusal's hint does: it lists every name)."""
    from poolkit import levels

    for name in ("mean@last4/256/int8", "splade/top8", "multivector:tokens/pool2/muvera",
                 "word:first", "span:x,y,x*y", "cls+mean_no_special"):  # fmt: skip
        poolkit.Recipe.parse(name)
    assert not levels._plugins_loaded
    assert poolkit.Recipe.parse("ids", level="hashed").family == "hashbag"
    assert levels._plugins_loaded


def test_its_level_parses_round_trips_and_names_its_family(hashbag):
    r = poolkit.Recipe.parse("hashed:IDS ")
    assert (str(r), r.level, r.family, r.kind) == ("hashed:ids", "hashed", "hashbag", "dense")
    assert poolkit.Recipe.from_json(r.to_json()) == r and r.pooled_dim(384) == 64
    with pytest.raises(poolkit.RecipeError, match=r"ids or ids_no_special.*hashed:ids"):
        poolkit.Recipe.parse("hashed:idz")
    with pytest.raises(poolkit.RecipeError, match=r"no output stage.*hashed level"):
        poolkit.Recipe.parse("hashed:ids/32")


def test_a_recipe_read_where_its_family_is_missing_says_so(hashbag):
    import importlib
    import pickle
    import sys

    stored = pickle.dumps(poolkit.Recipe.parse("hashed:ids"))  # as shipped to a Ray worker
    sys.path.remove(str(hashbag))  # a worker without the package (the fixture restores it)
    importlib.invalidate_caches()
    forget_family()
    recipe = pickle.loads(stored)
    with pytest.raises(poolkit.RecipeError, match=r"a registered level.*'hashed'.*Ray workers"):
        recipe.family  # noqa: B018


def test_library_embed_runs_its_plan(hashbag, minilm_dir):
    got = poolkit.embed(TEXTS, minilm_dir, recipe=["hashed:ids", "hashed:ids_no_special"])
    for name, drop in (("hashed:ids", False), ("hashed:ids_no_special", True)):
        assert got[name].dtype == np.float32 and got[name].shape == (3, 64)
        np.testing.assert_allclose(got[name], by_hand(minilm_dir, TEXTS, drop_special=drop),
                                   rtol=0, atol=1e-7)  # fmt: skip
    with pytest.raises(poolkit.InputError, match="one family"):
        poolkit.embed(TEXTS, minilm_dir, recipe=["hashed:ids", "mean"])


def test_cli_embed_writes_its_columns(hashbag, minilm_dir, tmp_path):
    data = tmp_path / "t.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for out in (tmp_path / "v.parquet", tmp_path / "v.npy"):
        result = clitools.run_cli(["embed", str(data), "-m", str(minilm_dir), "--recipe",
                                   "hashed:ids", "-o", str(out)], cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
    table = pq.read_table(tmp_path / "v.parquet")
    vectors = np.stack(table.column("hashed:ids").to_numpy(zero_copy_only=False))
    expected = by_hand(minilm_dir, TEXTS, drop_special=False)
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), vectors)


def _compare(tmp_path, data, task: str, *recipes: str) -> dict:
    import json

    out = tmp_path / f"{task}.json"
    result = clitools.run_cli(["compare", str(data), "--task", task, "--recipes", *recipes,
                               "--bootstrap", "0", "--quiet", "--no-cache", "--json", str(out)],
                              cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    return {r["recipe"]: r for r in json.loads(out.read_text())["results"]}


def _spearman_range(x: np.ndarray, gold: np.ndarray, eps: float) -> tuple[float, float]:
    """Spearman of ``x`` against ``gold`` with every group of near-tied ``x`` (within
    ``eps``) ordered worst first and best first (bag cosines tie often, and float rounding
    breaks a tie either way)."""
    from scipy.stats import rankdata

    group = np.floor(x / eps)
    ends = []
    for sign in (-1, 1):
        order = np.lexsort((sign * gold, group))
        ranks = np.empty(len(x))
        ranks[order] = np.arange(len(x))
        ends.append(float(np.corrcoef(ranks, rankdata(gold))[0, 1]))
    return min(ends), max(ends)


def test_a_compare_row_on_sts_is_its_vectors_scored_by_hand(hashbag, minilm_dir, tmp_path):
    from scipy.stats import pearsonr
    from testdata import fixture, read_sts_pairs

    data = fixture("stsb-dev-sample.csv")
    rows = _compare(tmp_path, data, "sts", "mean", "hashed:ids_no_special")
    pairs = read_sts_pairs(data)
    a, b = (by_hand(minilm_dir, [p[k] for p in pairs], drop_special=True) for k in (1, 2))
    cos = (a * b).sum(axis=1)  # unit rows
    gold = np.array([p[0] for p in pairs])
    row = rows["hashed:ids_no_special"]
    assert row["pearson"] == pytest.approx(pearsonr(cos, gold).statistic, abs=1e-6)
    lo, hi = _spearman_range(cos, gold, 1e-6)
    assert lo - 1e-4 <= row["spearman"] <= hi + 1e-4, (lo, row["spearman"], hi)
    assert row["embed_command"].endswith("--recipe hashed:ids_no_special")
    assert rows["mean"]["intended"] and not row["intended"]


def test_a_compare_row_on_retrieval_ranks_by_its_vectors(hashbag, minilm_dir, tmp_path):
    import json
    from pathlib import Path

    from beir_ref import read_qrels
    from tie_bounds import dot_eps, metric_range

    folder = Path(__file__).parent / "data" / "stsb-images-retrieval"
    rows = _compare(tmp_path, folder, "retrieval", "hashed:ids", "bm25")
    row = rows["hashed:ids"]
    read = lambda f: [json.loads(x) for x in (folder / f).read_text().splitlines()]  # noqa: E731
    docs, queries = read("corpus.jsonl"), read("queries.jsonl")
    assert not any(x.get("title") for x in docs)  # the documents are their texts
    d = by_hand(minilm_dir, [x["text"] for x in docs], drop_special=False)
    q = by_hand(minilm_dir, [x["text"] for x in queries], drop_special=False)
    measures = {"ndcg_at_10": "ndcg_cut_10", "recall_at_100": "recall_100"}
    ranges = metric_range(read_qrels(folder), [x["_id"] for x in queries],
                          [x["_id"] for x in docs], q @ d.T, dot_eps(q, d), measures)  # fmt: skip
    for name, (lo, hi) in ranges.items():
        assert lo - 1e-9 <= row[name] <= hi + 1e-9, (name, lo, row[name], hi)
    assert row["bytes_per_document"] == 64 * 4 and row["search_growth"].startswith("linear")
    assert row["query_ms"] is not None and rows["bm25"]["ndcg_at_10"] != row["ndcg_at_10"]


def test_a_family_row_on_a_task_it_cannot_serve_is_refused_in_one_line(hashbag, tmp_path):
    from testdata import fixture

    result = clitools.run_cli(["compare", str(fixture("wnut17-dev-sample.conll")), "--task",
                               "ner", "--train", str(fixture("wnut17-train-sample.conll")),
                               "--recipes", "hashed:ids"], cwd=tmp_path)  # fmt: skip
    clitools.one_error_line(result, 2, "hashed:ids", "--task sts, classification, retrieval")


@pytest.mark.slow  # a Ray of its own, started by the job
def test_an_engine_ray_job_runs_its_plan_on_the_workers(hashbag, minilm_dir, tmp_path):
    """Installed where the workers run (here its folder on PYTHONPATH, which a local Ray's
    workers inherit, as a package installed on every node), the family runs on Ray's
    workers and writes the rows one machine writes."""
    import os
    import subprocess

    import pyarrow.dataset as pads

    data = tmp_path / "t.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    paths = [str(hashbag), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "CI": "true", "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = tmp_path / "out"
    job = subprocess.run(
        clitools.command("embed", str(data), "-m", str(minilm_dir), "--recipe", "hashed:ids",
                         "-o", str(out), "--engine", "ray", "--workers", "1",
                         "--cpus-per-worker", "1", "--quiet"),
        env=env, cwd=tmp_path, capture_output=True, timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr.decode()[-3000:]
    table = pads.dataset(out, format="parquet").to_table()
    order = np.argsort(table["id"].to_numpy())
    vectors = np.stack(table["hashed:ids"].to_numpy(zero_copy_only=False))[order]
    np.testing.assert_allclose(vectors, by_hand(minilm_dir, TEXTS, drop_special=False),
                               rtol=0, atol=1e-7)  # fmt: skip
