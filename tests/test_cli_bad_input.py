"""Every kind of bad input through ``poolkit embed``: a clear answer, no debris.

Refused input: exit status 2 (usage/input) or 1 (runtime), exactly one line on stderr
that says what and where (line number, column, path), no traceback, and nothing left
behind: no OUTPUT, no work directory, no temporary file. Accepted-with-warning input
(blank lines among texts, a 5 MB line) is checked against the library on the same texts.
The 5 MB line runs as its own process: its peak memory is what that test measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clitools import command, run_cli

import poolkit

pytestmark = pytest.mark.slow


def poolkit_cli(cwd: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    """Run the CLI (in this process); (exit status, stderr)."""
    result = run_cli(args, cwd=cwd, stdin=stdin)
    return result.returncode, result.stderr.decode()


def poolkit_process(cwd: Path, *args: str) -> tuple[int, str, int]:
    """Run the CLI as its own process, whose peak memory is the command's alone; (exit
    status, stderr, peak resident memory in MB)."""
    proc = subprocess.Popen(command(*args), cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    # wait4, not wait: it also returns the child's resource usage (peak memory).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err.decode(), usage.ru_maxrss // 1024


def refused(cwd: Path, args: list[str], code: int, *fragments: str, stdin: bytes | None = None):
    before = sorted(p.name for p in cwd.iterdir())
    status, err = poolkit_cli(cwd, "embed", *args, stdin=stdin)
    assert status == code, err
    assert err.count("\n") == 1 and err.startswith("poolkit: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
    assert sorted(p.name for p in cwd.iterdir()) == before, "debris left behind"


# (file name, content, extra args, fragments of the one error line); all exit status 2.
INPUT_CASES = {
    "empty file": ("empty.txt", b"", [], ["empty.txt: Expected texts, but the input is empty"]),
    "only blank lines": ("blank.txt", b"\n  \n\t\n\n", [], ["Expected a text to embed, but all 4 texts are blank"]),
    "invalid UTF-8": ("latin1.txt", "ok\nstill ok\ncaf\xe9\n".encode("latin-1"), [],
                      ["latin1.txt: line 3: Expected UTF-8 text, but it is not valid UTF-8", "Convert the file to UTF-8"]),
    "NUL byte": ("nul.txt", b"fine\nbad\x00line\n", [], ["nul.txt: line 2: Expected UTF-8 text, but it contains a NUL byte"]),
    "UTF-16 without BOM": ("utf16.txt", "hello\nworld\n".encode("utf-16-le"), [],
                           ["line 1: Expected UTF-8 text, but it contains a NUL byte", "UTF-16"]),
    "CSV missing column": ("nocol.csv", b"id,body\n1,hello\n", [],
                           ["Expected a 'text' column, but its columns are: id, body", "--text-column"]),
    "CSV named column missing": ("named.csv", b"id,body\n1,hello\n", ["--text-column", "txt"],
                                 ["Expected --text-column to be a column of the input, but got 'txt'. Its columns: id, body"]),
    "CSV row with too few fields": ("short.csv", b"id,text\n1,hello\n2\n", [],
                                    ["short.csv: line 3: Expected the header's 2 fields, but got 1"]),
    "CSV row with too many fields": ("long.csv", b"id,text\n1,hello\n2,hello, world\n", [],
                                     ["long.csv: line 3: Expected at most the header's 2 fields, but got 3"]),
    "CSV quote never closed": ("open.csv", b'id,text\n1,"never closed\n2,x\n', [],
                               ["open.csv: line 3: Expected valid CSV, but it is not", "quotes"]),
    "JSONL bad line": ("bad.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"text": oops}\n', [],
                       ["bad.jsonl: line 3: Expected valid JSON, but it is not"]),
    "JSONL non-string value": ("int.jsonl", b'{"text": "a"}\n{"text": 5}\n', [],
                               ['int.jsonl: line 2: Expected a string in "text", but got int']),
    "JSONL null value": ("null.jsonl", b'{"text": null}\n', [], ['line 1: Expected a string in "text", but got NoneType']),
    "JSONL missing key": ("key.jsonl", b'{"text": "a"}\n{"body": "b"}\n', [],
                          ['key.jsonl: line 2: Expected a "text" field, but its fields are: body']),
    "JSONL not an object": ("list.jsonl", b'{"text": "a"}\n[1, 2]\n', [],
                            ["line 2: Expected an object with a \"text\" field, but got a JSON list"]),
    "JSONL lone surrogate": ("sur.jsonl", b'{"text": "a"}\n{"text": "x \\ud800"}\n', [],
                             ["sur.jsonl: line 2: Expected text, but got an unpaired surrogate escape (\\ud800"]),
    "unknown extension": ("in.docx", b"hello\n", [], ["Expected an extension that names the format", "but got 'docx'", "--input-format"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(INPUT_CASES))
def test_bad_input_file(tmp_path, case):
    name, content, extra, fragments = INPUT_CASES[case]
    (tmp_path / name).write_bytes(content)
    refused(tmp_path, [name, "-o", "out.npy", *extra], 2, *fragments)


def test_bad_stdin(tmp_path):
    refused(tmp_path, ["-", "-o", "out.npy"], 2, "<stdin>: line 2: Expected UTF-8 text, but it is not valid UTF-8",
            stdin=b"ok\n\xff\xfe\n")  # fmt: skip


def test_parquet_wrong_column_type_null_and_not_parquet(tmp_path):
    pq.write_table(pa.table({"text": pa.array([1, 2, 3])}), tmp_path / "int.parquet")
    refused(tmp_path, ["int.parquet", "-o", "o.npy"], 2,
            "int.parquet: Expected strings in column 'text', but got int64")  # fmt: skip
    pq.write_table(pa.table({"text": pa.array(["a", None])}), tmp_path / "null.parquet")
    refused(
        tmp_path,
        ["null.parquet", "-o", "o.npy"],
        2,
        "row 1: Expected a string in column 'text', but got null",
    )
    (tmp_path / "fake.parquet").write_text("not parquet")
    refused(
        tmp_path,
        ["fake.parquet", "-o", "o.npy"],
        2,
        "fake.parquet: Expected a readable Parquet file, but it is not",
    )


def test_outputs_that_cannot_be_written(tmp_path):
    (tmp_path / "in.txt").write_text("hello\n")
    (tmp_path / "a_file").write_text("x")
    refused(tmp_path, ["in.txt", "-o", "missing/out.npy"], 2, "'missing' does not exist")
    refused(tmp_path, ["in.txt", "-o", "a_file/out.npy"], 2, "'a_file' is not a directory")
    (tmp_path / "exists.npy").write_bytes(b"keep me")
    refused(tmp_path, ["in.txt", "-o", "exists.npy"], 2,
            "exists.npy: already exists; pass --overwrite")  # fmt: skip
    assert (tmp_path / "exists.npy").read_bytes() == b"keep me"
    refused(
        tmp_path, ["in.txt", "-o", "out.csv"], 2, "Expected an output name ending in .npy, .parquet"
    )
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
        refused(tmp_path, ["in.txt", "-o", "ro/out.npy"], 2, "'ro' is not writable")
    else:
        # Root ignores permission bits: use a directory no one may create files in.
        status, err = poolkit_cli(tmp_path, "embed", "in.txt", "-o", "/proc/out.npy")
        assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "/proc" in err and ("not writable" in err or "cannot create" in err), err
        assert not Path("/proc/out.npy").exists()


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "bad.jsonl").write_bytes(b"{oops}\n")
    status, err = poolkit_cli(tmp_path, "embed", "bad.jsonl", "-o", "o.npy", "--debug")
    assert (
        status == 1 and "Traceback" in err and "line 1: Expected valid JSON, but it is not" in err
    )


def library(texts: list[str], minilm) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return poolkit.embed(texts, minilm)


def test_blank_lines_among_texts_are_kept_with_a_warning(tmp_path, minilm):
    texts = ["one", "", "two", "   ", "three"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    status, err = poolkit_cli(tmp_path, "embed", "in.txt", "-o", "out.npy")
    assert status == 0, err
    lines = err.strip().splitlines()
    assert lines[0] == (
        "poolkit: warning: 2 blank texts (empty or whitespace only) were kept as empty "
        "texts, ids 1, 3."
    )
    assert lines[1].startswith("poolkit: 5 texts -> out.npy")
    # Row ids stay aligned with line numbers (id = line - 1).
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), library(texts, minilm), atol=1e-5)


def test_csv_quoted_newlines_and_quotes(tmp_path, minilm):
    (tmp_path / "in.csv").write_bytes(b'id,text\n1,"line one\nline two"\n2,"say ""hi"""\n')
    status, err = poolkit_cli(tmp_path, "embed", "in.csv", "-o", "out.jsonl")
    assert status == 0, err
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    want = library(["line one\nline two", 'say "hi"'], minilm)
    np.testing.assert_allclose(np.array([r["mean"] for r in rows]), want, atol=1e-5)


def test_five_megabyte_line_is_truncated_without_a_memory_blowup(tmp_path, minilm):
    rng = np.random.default_rng(0)
    vocab = ["the", "model", "reads", "text", "quickly", "and", "pools", "tokens", "ünïcödé"]
    huge = " ".join(rng.choice(vocab, size=1_000_000))[:5_000_000]
    texts = ["short line", huge, "last line"]
    (tmp_path / "small.txt").write_text("short line\nlast line\n")
    (tmp_path / "huge.txt").write_text("\n".join(texts) + "\n")
    status, err, base = poolkit_process(tmp_path, "embed", "small.txt", "-o", "small.npy")
    assert status == 0, err
    status, err, peak = poolkit_process(tmp_path, "embed", "huge.txt", "-o", "huge.npy")
    assert status == 0, err
    assert "3 texts -> huge.npy" in err and "1 truncated (longer than 256 tokens" in err
    # Tokenizing the whole line would cost ~750 MB more; the cut prefix costs little.
    assert peak - base < 250, (base, peak)
    # The cut happens only where it cannot change the kept tokens: same vector as the
    # library, which tokenizes the whole line.
    np.testing.assert_allclose(np.load(tmp_path / "huge.npy"), library(texts, minilm), atol=1e-5)
