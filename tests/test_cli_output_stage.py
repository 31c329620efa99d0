"""poolkit embed --recipe NAME/--dims/--precision: the stored form in .npy (+ its
.poolkit.json record), Parquet (metadata) and JSON Lines (and -o -), int8 ranges from
--calibrate, the first input texts or --ranges, resume with other ranges refused, Ray
refused; real subprocesses, compared with poolkit.embed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from clitools import one_error_line
from clitools import poolkit as run

import poolkit
from poolkit.output import Calibration


@pytest.fixture(scope="module")
def work(tmp_path_factory, sts_dev) -> Path:
    d = tmp_path_factory.mktemp("stage")
    (d / "corpus.txt").write_text("\n".join(sts_dev[:60]) + "\n")
    (d / "calib.txt").write_text("\n".join(sts_dev[100:180]) + "\n")
    (d / "queries.txt").write_text("\n".join(sts_dev[200:210]) + "\n")
    return d


def _model(minilm_dir: Path) -> list[str]:
    return ["-m", str(minilm_dir), "--device", "cpu", "-q"]


@pytest.mark.slow  # whole embed jobs in processes: 15-25 s each on 2 cores
def test_npy_int8_with_calibrate_and_ranges_for_queries(work, minilm_dir, sts_dev) -> None:
    out = work / "corpus.npy"
    r = run("embed", "corpus.txt", "-o", str(out), "--recipe", "mean/256/int8",
            "--calibrate", "calib.txt", *_model(minilm_dir), cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    stored = np.load(out)
    lib, stats = poolkit.embed(sts_dev[:60], minilm_dir, recipe="mean/256/int8", device="cpu",
                               calibration=sts_dev[100:180], return_stats=True)  # fmt: skip
    assert stored.dtype == np.int8 and np.array_equal(stored, lib)
    record = json.loads((work / "corpus.npy.poolkit.json").read_text())
    col = record["columns"]["mean/256/int8"]
    assert col["dims"] == 256 and col["bytes_per_vector"] == 256 and col["stored_dtype"] == "int8"
    cal = Calibration.from_json(col["calibration"])
    assert cal == stats.calibration["mean/256/int8"] and "--calibrate calib.txt" in cal.source
    # Queries quantised with the corpus' ranges (--ranges), as the library does with them.
    r = run("embed", "queries.txt", "-o", "q.jsonl", "--dims", "256", "--precision", "int8",
            "--ranges", str(out) + ".poolkit.json", *_model(minilm_dir), cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    rows = [json.loads(line) for line in (work / "q.jsonl").read_text().splitlines()]
    q = np.array([row["mean/256/int8"] for row in rows])
    ref = poolkit.embed(sts_dev[200:210], minilm_dir, recipe="mean/256/int8", device="cpu",
                        calibration=cal)  # fmt: skip
    assert np.array_equal(q, ref)


@pytest.mark.slow  # whole embed jobs in processes: 15-25 s each on 2 cores
def test_parquet_binary_and_stdout_ubinary(work, minilm_dir, sts_dev) -> None:
    r = run("embed", "corpus.txt", "-o", "bits.parquet", "--dims", "128", "--precision",
            "binary", *_model(minilm_dir), cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    table = pq.read_table(work / "bits.parquet")
    col = table.column("mean/128/binary")
    assert str(col.type) == "fixed_size_list<element: int8>[16]"
    stored = np.array(col.to_pylist(), dtype=np.int8)
    lib = poolkit.embed(sts_dev[:60], minilm_dir, recipe="mean/128/binary", device="cpu")
    assert np.array_equal(stored, lib)
    meta = json.loads(table.schema.metadata[b"poolkit"])["columns"]["mean/128/binary"]
    assert meta["precision"] == "binary" and meta["bytes_per_vector"] == 16
    assert meta["calibration"] is None
    r = run("embed", "corpus.txt", "-o", "-", "--recipe", "mean/ubinary",
            *_model(minilm_dir), cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    rows = [json.loads(line)["mean/ubinary"] for line in r.stdout.decode().splitlines()]
    assert np.array_equal(np.array(rows, np.uint8),
                          poolkit.embed(sts_dev[:60], minilm_dir, recipe="mean/ubinary",
                                        device="cpu"))  # fmt: skip


@pytest.mark.slow  # whole embed jobs in processes: 15-25 s each on 2 cores
def test_int8_on_the_first_texts_and_resume_with_other_ranges(work, minilm_dir) -> None:
    texts = (work / "corpus.txt").read_text().splitlines()[:12]
    rows = [json.dumps({"text": t if i != 9 else 5}) for i, t in enumerate(texts)]
    (work / "part.jsonl").write_text("\n".join(rows) + "\n")
    args = ["embed", "part.jsonl", "-o", "part.npy", "--precision", "uint8", "--part-size", "4",
            *_model(minilm_dir)]  # fmt: skip
    r = run(*args, cwd=work)
    assert r.returncode == 2 and "rerun with --resume" in r.stderr.decode()
    rows[9] = json.dumps({"text": texts[9]})
    (work / "part.jsonl").write_text("\n".join(rows) + "\n")
    # Other ranges (from --calibrate) than the checkpoint's: refused, nothing written.
    r = run(*args, "--resume", "--calibrate", "calib.txt", cwd=work)
    one_error_line(r, 2, "the settings the checkpoint was made with", "output_ranges")
    assert not (work / "part.npy").exists()
    r = run(*args, "--resume", cwd=work)
    assert r.returncode == 0, r.stderr.decode()
    col = json.loads((work / "part.npy.poolkit.json").read_text())["columns"]["mean/uint8"]
    assert "first 4 non-blank input texts (ids 0..3)" in col["calibration"]["source"]
    # The same batches as the command's parts of 4 (a batch's padding moves a float32
    # vector by ~1e-8, which may cross a bucket's edge).
    _, stats = poolkit.embed(texts[:4], minilm_dir, recipe="mean/uint8", device="cpu",
                             calibration=texts[:4], return_stats=True)  # fmt: skip
    cal = stats.calibration["mean/uint8"]
    assert Calibration.from_json(col["calibration"]) == cal
    ref = np.concatenate([poolkit.embed(texts[k : k + 4], minilm_dir, recipe="mean/uint8",
                                        device="cpu", calibration=cal) for k in (0, 4, 8)])  # fmt: skip
    assert np.array_equal(np.load(work / "part.npy"), ref)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--engine", "ray", "--precision", "int8"], ["--engine ray", "--calibrate FILE"]),
        (["--recipe", "mean/64/uint8", "--engine", "ray"], ["--engine ray", "--calibrate"]),
        (["--ranges", "x.json"], ["Expected --ranges to be given with --precision int8 or uint8"]),
        (["--recipe", "mean/256", "--dims", "128"], ["--dims", "as the recipe 'mean/256' says"]),
        (["--recipe", "word:first/int8"], ["no output stage", "word level"]),
        (["--calibrate", "calib.txt"], ["Expected --calibrate to be given only with"]),
        (
            ["--precision", "int8", "--ranges", "missing.json"],
            ["Expected --ranges to be an existing file", "missing.json"],
        ),
    ],
)
def test_bad_output_stage_flags_are_one_line(work, argv, fragments) -> None:
    r = run("embed", "corpus.txt", "-o", "bad.npy", *argv, cwd=work)
    one_error_line(r, 2, *fragments)
    assert not (work / "bad.npy").exists() and not (work / "bad.npy.poolkit.json").exists()


def test_dims_wider_than_the_model_is_one_line(work, minilm_dir) -> None:
    r = run("embed", "corpus.txt", "-o", "wide.npy", "--dims", "999", *_model(minilm_dir),
            cwd=work)  # fmt: skip
    one_error_line(r, 2, "--dims", "at most the recipe's width 384")
    assert not list(work.glob("wide.npy*"))
