"""Two CLI paths whose end-to-end tests are slow, in the fast set: ``embed -o -`` (JSON Lines
on stdout, ``test_cli_stdout.py`` runs it in processes on the real model) in-process on the
tiny BERT, and ``--engine ray --resume``'s file stamps and per-file cut of a block, without
a Ray cluster (``test_ray_resume.py`` kills and resumes a real one)."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from clitools import run_cli

from poolkit.cli._ray_resume import file_stamp, split_by_file

TEXTS = ["John works at Google", "", "A cat sat on the mat.", "hello world", "Paris in spring"]


def test_stdout_json_lines_equal_the_npy_output(tiny_dirs, tmp_path):
    model = str(tiny_dirs["bert_plain"])
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    args = ["--model", model, "--part-size", "2"]
    npy = run_cli(["embed", str(src), "-o", str(tmp_path / "out.npy"), "--quiet", *args],
                  cwd=tmp_path)  # fmt: skip
    assert npy.returncode == 0, npy.stderr
    streamed = run_cli(["embed", str(src), "-o", "-", *args], cwd=tmp_path)
    assert streamed.returncode == 0, streamed.stderr
    out, err = streamed.stdout.decode(), streamed.stderr.decode()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))
    assert all(set(r) == {"id", "mean"} for r in rows)
    np.testing.assert_array_equal(
        np.array([r["mean"] for r in rows], dtype=np.float32), np.load(tmp_path / "out.npy")
    )
    assert "1 blank text" in err and "-> <stdout>" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.txt",
        "out.npy",
        "out.npy.poolkit.json",
    ]


def test_file_stamp_hashes_every_byte(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"x" * (3 << 20) + b"y\n")  # more than one 1 MiB read
    stamp = file_stamp(SimpleNamespace(path=str(path)))
    stat = path.stat()
    assert stamp == {
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def test_a_block_is_cut_at_input_file_boundaries_in_id_order():
    table = pa.table({"id": [5, 0, 3, 1, 4, 2], "text": list("fadbec")})
    offsets = [0, 2, 2, 4]  # file 1 is empty: it shares file 2's first id
    got = [
        (k, first, t.column("text").to_pylist()) for k, first, t in split_by_file(table, offsets)
    ]
    assert got == [(0, 0, ["a", "b"]), (2, 2, ["c", "d"]), (3, 4, ["e", "f"])]
    assert list(split_by_file(table.slice(0, 0), offsets)) == []
