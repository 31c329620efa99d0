"""``poolkit compare``'s rows as ``poolkit embed`` writes them: budget names in
``--recipes`` (the same figures as ``--dims``/``--precision``), the ranges each int8 row
was scored with (in ``--json``, read back by ``embed --ranges``), ``embed --calibrate``
on all of FILE, no ``export`` command for a row export refuses, the answer on a near tie,
and the BEIR-folder hint for a lone ``corpus.jsonl``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from clitools import poolkit

import poolkit as pk
from poolkit.compare import report
from poolkit.compare.datasets import DataError
from poolkit.compare.retrieval import read_retrieval
from poolkit.output import Calibration, truncate
from poolkit.recipe import Recipe

PAIRS = Path(__file__).parent / "data" / "stsb-images-pairs.csv"


def _rows(path: Path) -> dict[str, dict]:
    return {r["recipe"]: r for r in json.loads(path.read_text())["results"] if not r["rescore"]}


def test_budget_names_in_recipes_score_as_the_flags_do(tiny_dirs, tmp_path):
    model = ["--model", str(tiny_dirs["bert_plain"]), "--bootstrap", "0"]
    named = poolkit("compare", str(PAIRS), "--task", "retrieval", "--recipes", "mean",
                    "mean/16/int8", "mean/binary", "--json", "named.json", *model, cwd=tmp_path)  # fmt: skip
    assert named.returncode == 0, named.stderr.decode()
    flags = poolkit("compare", str(PAIRS), "--task", "retrieval", "--recipes", "mean",
                    "--dims", "16", "--precision", "int8", "--json", "flags.json", *model,
                    cwd=tmp_path)  # fmt: skip
    assert flags.returncode == 0, flags.stderr.decode()
    bits = poolkit("compare", str(PAIRS), "--task", "retrieval", "--recipes", "mean",
                   "--precision", "binary", "--json", "bits.json", *model, cwd=tmp_path)  # fmt: skip
    assert bits.returncode == 0, bits.stderr.decode()
    a, b, c = (
        _rows(tmp_path / "named.json"),
        _rows(tmp_path / "flags.json"),
        _rows(tmp_path / "bits.json"),
    )
    assert set(a) == {"mean", "mean/16/int8", "mean/binary"}
    for name, other in (("mean/16/int8", b), ("mean/binary", c), ("mean", b)):
        for metric in ("ndcg_at_10", "mrr_at_10", "recall_at_100", "map_at_100"):
            assert a[name][metric] == other[name][metric], (name, metric)
    # The ranges the int8 row was scored with: the documents' float vectors' min and max.
    data = read_retrieval(PAIRS)
    docs = pk.embed(data.documents, str(tiny_dirs["bert_plain"]), recipe="mean")
    want = Calibration.from_vectors(truncate(docs, 16, normalize=False))
    got = Calibration.from_json(a["mean/16/int8"]["ranges"])
    np.testing.assert_allclose(got.starts, want.starts, atol=1e-6)
    np.testing.assert_allclose(got.steps, want.steps, atol=1e-6)
    # ... which `poolkit embed --ranges` reads back from the --json file.
    (tmp_path / "q.txt").write_text("a dog runs\ntwo cats\n")
    made = poolkit("embed", "q.txt", "-o", "q.npy", "--recipe", "mean/16/int8", "--ranges",
                   "named.json", "--model", str(tiny_dirs["bert_plain"]), cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr.decode()
    record = json.loads((tmp_path / "q.npy.poolkit.json").read_text())
    assert Calibration.from_json(record["columns"]["mean/16/int8"]["calibration"]) == got


def test_budget_names_are_refused_for_tasks_without_budget_rows(tmp_path):
    (tmp_path / "c.txt").write_text("1 a\n0 b\n1 c\n0 d\n")
    r = poolkit("compare", "c.txt", "--task", "classification", "--recipes", "mean/64/int8",
                cwd=tmp_path)  # fmt: skip
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1, err
    assert "Expected --recipes to be recipes without an output stage" in err
    assert "but got mean/64/int8" in err and "--task classification" in err


def test_calibrate_uses_every_text_of_the_file(tiny_dirs, tmp_path):
    texts = [
        f"sentence {k} about {'cats' if k % 3 else 'the weather in spring'}" for k in range(1200)
    ]
    texts[1150] = "an outlier far past the first thousand texts " * 8
    (tmp_path / "cal.txt").write_text("\n".join(texts) + "\n")
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    model = str(tiny_dirs["bert_plain"])
    made = poolkit("embed", "in.txt", "-o", "o.npy", "--recipe", "mean/int8", "--calibrate",
                   "cal.txt", "--model", model, cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr.decode()
    cal = json.loads((tmp_path / "o.npy.poolkit.json").read_text())["columns"]["mean/int8"]
    cal = Calibration.from_json(cal["calibration"])
    assert "all its 1200 non-blank texts" in cal.source
    want = Calibration.from_vectors(pk.embed(texts, model, recipe="mean"))
    np.testing.assert_allclose(cal.starts, want.starts, atol=1e-5)
    np.testing.assert_allclose(cal.steps, want.steps, atol=1e-5)


def test_export_commands_of_output_stage_rows_carry_their_ranges():
    from poolkit.cli.compare import export_command

    args = argparse.Namespace(model=None, backend="torch", json="r.json", task="sts", data="d.csv")
    assert export_command(args, Recipe.parse("mean/256/int8")) == (
        "poolkit export -o exported --recipe mean/256/int8 --format onnx --ranges r.json"
    )
    assert export_command(args, Recipe.parse("mean/binary")) == (
        "poolkit export -o exported --recipe mean/binary --format onnx"
    )
    assert export_command(args, Recipe.parse("mean/256")) == (
        "poolkit export -o exported --recipe mean/256"
    )
    assert export_command(args, Recipe.parse("mean")) == "poolkit export -o exported --recipe mean"
    args.json = None
    assert export_command(args, Recipe.parse("mean/uint8")).endswith("--calibrate FILE")
    assert export_command(args, Recipe.parse("word:endpoints")) is None


def _result(name: str, ndcg: float, intended: bool = False, vs=None, ms=1.0) -> report.Result:
    metrics = {"ndcg_at_10": ndcg, "mrr_at_10": 0.5, "recall_at_100": 0.9, "map_at_100": 0.4}
    return report.Result(Recipe.parse(name), metrics, intended=intended, vs_best=vs,
                         bytes_per_document=1536.0, encode_ms=ms, search_ms=0.5)  # fmt: skip


def test_the_answer_names_the_intended_row_on_a_near_tie():
    """The answer's best is the table's #1; the intended row a hair below it, which the
    paired test cannot tell from it, is named where it costs less (here: query time)."""
    from poolkit.compare.bootstrap import Paired
    from poolkit.compare.recommend import answer_lines

    tied = [_result("mean_no_special", 0.64513, ms=2.0),
            _result("mean", 0.6451, intended=True, vs=Paired(-3e-5, (-0.002, 0.002)))]  # fmt: skip
    ranked = report.rank(tied, "ndcg_at_10")
    assert ranked[0].recipe == Recipe.parse("mean_no_special")
    boot = report.bootstrap_info("retrieval", 100, 0, 10)
    lines = answer_lines("retrieval", ranked, boot, lambda r: f"CMD {r.recipe}")
    assert lines[0].startswith("best: #1 mean_no_special (ndcg_at_10 0.6451;")
    assert lines[1].startswith("cheapest tied with #1 by bytes/doc and by query time: #2 mean")
    assert lines[-1] == "embed #2 mean: CMD mean"


def test_a_beir_corpus_file_alone_hints_at_the_folder(tmp_path):
    folder = tmp_path / "scifact"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "1", "title": "T", "text": "x"}\n')
    with pytest.raises(
        DataError, match=r"Pass the folder .*scifact.* corpus\.jsonl, queries\.jsonl"
    ):
        read_retrieval(folder / "corpus.jsonl")
    (tmp_path / "pairs.jsonl").write_text('{"q": "a", "d": "b"}\n')
    with pytest.raises(
        DataError, match="Expected `query_column` to be a column of the file, but got 'query'"
    ):
        read_retrieval(tmp_path / "pairs.jsonl")


def test_calibrate_merges_the_ranges_of_every_part(tiny_dirs, tmp_path, monkeypatch, capfd):
    """A --calibrate FILE larger than a part is embedded part by part (bounded memory); the
    ranges are the least and greatest value over all of them."""
    from poolkit.cli import _output_args, main

    texts = [f"part text {k} " + "word " * (k % 7) for k in range(130)]
    texts[120] = "an outlier in the last part " * 6
    (tmp_path / "cal.txt").write_text("\n".join(texts) + "\n")
    (tmp_path / "in.txt").write_text("one\n")
    monkeypatch.setattr(_output_args.calibrate_file_texts, "__defaults__", (50,))
    model = str(tiny_dirs["bert_plain"])
    out = str(tmp_path / "o.npy")
    argv = ["embed", str(tmp_path / "in.txt"), "-o", out, "--recipe", "mean/8/int8",
            "--calibrate", str(tmp_path / "cal.txt"), "--model", model, "--quiet"]  # fmt: skip
    assert main(argv) == 0
    cal = json.loads(Path(out + ".poolkit.json").read_text())["columns"]["mean/8/int8"]
    cal = Calibration.from_json(cal["calibration"])
    assert "all its 130 non-blank texts" in cal.source
    want = pk.embed(texts, model, recipe="mean")[:, :8]
    np.testing.assert_allclose(cal.ranges, np.vstack((want.min(0), want.max(0))), atol=1e-5)
