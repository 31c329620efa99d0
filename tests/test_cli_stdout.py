"""``poolkit embed ... -o -``: JSON Lines on stdout, progress and summary on stderr.

Every stdout line must parse as JSON and hold the vector the same command writes to a
``.npy`` file (bit for bit: both go through float32). The commands run in this process;
the pipe into ``jq`` runs the console script in a shell, the shell line being what it checks.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import clitools
import numpy as np
import pytest
from clitools import poolkit

pytestmark = pytest.mark.slow

TEXTS = ["John works at Google", "", "A cat sat on the mat.", "hello world", "Paris in spring"]


def test_stdout_json_lines_equal_the_npy_output(tmp_path):
    data = ("\n".join(TEXTS) + "\n").encode()
    (tmp_path / "in.txt").write_bytes(data)
    npy = poolkit("embed", "in.txt", "-o", "out.npy", "--part-size", "2", cwd=tmp_path)
    assert npy.returncode == 0, npy.stderr.decode()
    streamed = poolkit("embed", "-", "-o", "-", "--part-size", "2", cwd=tmp_path, stdin=data)
    assert streamed.returncode == 0, streamed.stderr.decode()
    rows = [json.loads(line) for line in streamed.stdout.decode().splitlines()]
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))
    assert all(set(r) == {"id", "mean"} for r in rows)
    np.testing.assert_array_equal(
        np.array([r["mean"] for r in rows], dtype=np.float32), np.load(tmp_path / "out.npy")
    )
    err = streamed.stderr.decode().splitlines()
    assert err[0].startswith("poolkit: warning: 1 blank text ")
    assert err[1].startswith("poolkit: 5 texts -> <stdout> [mean=384] in ") and len(err) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.txt",
        "out.npy",
        "out.npy.poolkit.json",
    ]


def test_several_strategies_and_a_pipe_into_jq(tmp_path):
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    pipe = subprocess.run(
        "set -o pipefail; poolkit embed - -o - -s cls mean -q < in.txt "
        "| jq -c '[.id, (.cls | length), (.mean | length)]'",
        shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True,
        timeout=300, env=clitools.with_poolkit_on_path(),
    )  # fmt: skip
    assert pipe.returncode == 0, pipe.stderr
    assert pipe.stderr.startswith("poolkit: warning: 1 blank text ")  # -q keeps warnings
    assert pipe.stderr.count("\n") == 1
    assert pipe.stdout.splitlines() == [f"[{i},384,384]" for i in range(len(TEXTS))]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--resume"], "Expected -o to be an OUTPUT file with --resume, but got - (stdout), which "
                       "keeps no work directory to resume from."),
        (["--overwrite"], "Expected --overwrite to be given with an OUTPUT file, but got -o - "
                          "(stdout). Drop it."),
        (["--engine", "ray"], "Expected -o to be a folder with --engine ray (it writes Parquet "
                              "shards), but got - (stdout). Name a folder."),
    ],
)  # fmt: skip
def test_flags_that_need_a_file_are_refused(tmp_path, argv, message):
    result = poolkit("embed", "-", "-o", "-", *argv, cwd=tmp_path, stdin=b"hello\n")
    assert result.returncode == 2
    assert (result.stdout, result.stderr.decode()) == (b"", f"poolkit: error: {message}\n")


def test_only_blank_texts_write_nothing(tmp_path):
    result = poolkit("embed", "-", "-o", "-", "--part-size", "1", cwd=tmp_path,
                     stdin=b"\n  \n\n")  # fmt: skip
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode() == (
        "poolkit: error: -: Expected a text to embed, but all 3 texts are blank (empty or "
        "whitespace only).\n"
    )
