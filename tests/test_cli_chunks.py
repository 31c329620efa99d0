"""``poolkit embed --chunks``: one row per chunk, from the command (``kill -9`` on its own
process, the others in this one).

- The rows (``id``, ``chunk``, ``start``, ``end``, ``text``, vectors) equal
  ``poolkit.embed_chunks`` on the same documents, naive and ``--late``, through
  ``.parquet``, ``.jsonl`` and ``-o -``, the job cut into parts of 2 documents.
- ``column:NAME`` reads the spans beside the text (jsonl lists, csv JSON strings).
- ``kill -9`` after the first part, then ``--resume``: the bytes of an uninterrupted run;
  a resume with other chunk settings is refused.
- Every refusal is one line, exit status 2, nothing left behind (an empty document in a
  later part: the finished parts kept for ``--resume``, no output).
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from clitools import command, one_error_line, poolkit

LONGDOCS = Path(__file__).parent / "data" / "stsb-images-longdocs" / "corpus.jsonl"
CHUNKS = "tokens:32:8"


def long_documents(n: int) -> list[str]:
    """STS-B captions documents of 352-956 tokens (the default model's tokenizer)."""
    lines = LONGDOCS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines[:n]]


def documents() -> list[str]:
    """Two documents past the model's 256 tokens, two short ones, one more."""
    first, second, third = long_documents(3)
    return [first, "A short one. Two sentences!", "Three words here.", second, third[:300]]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def job(tmp_path_factory, minilm_dir):
    cwd = tmp_path_factory.mktemp("chunks")
    write_jsonl(cwd / "docs.jsonl", [{"text": d} for d in documents()])
    return cwd, ["--model", str(minilm_dir)]


def expected_rows(docs: list[str], chunks, model: Path, **kwargs) -> dict:
    """``embed_chunks`` on the documents, flattened to the CLI's rows."""
    import poolkit

    kept = list(range(len(docs)))
    out = poolkit.embed_chunks(docs, chunks, model=model, **kwargs)
    both = np.concatenate([c.spans for c in out])
    return {
        "id": np.concatenate([[i] * len(c.spans) for i, c in zip(kept, out, strict=True)]),
        "chunk": np.concatenate([np.arange(len(c.spans)) for c in out]),
        "start": both[:, 0],
        "end": both[:, 1],
        "mean": np.concatenate([c.vectors for c in out]),
    }


def check_rows(rows: dict, want: dict, docs: list[str]) -> None:
    for column in ("id", "chunk", "start", "end"):
        np.testing.assert_array_equal(np.asarray(rows[column], np.int64), want[column])
    assert np.abs(np.asarray(rows["mean"], np.float32) - want["mean"]).max() < 1e-6
    cut = [docs[i][a:b] for i, a, b in zip(want["id"], want["start"], want["end"], strict=True)]
    if "text" in rows:
        assert list(rows["text"]) == cut


def parquet_rows(path: Path) -> dict:
    table = pq.read_table(path)
    rows = {name: table[name].to_pylist() for name in table.column_names}
    rows["mean"] = np.stack(table["mean"].to_numpy(zero_copy_only=False))
    return rows


def jsonl_rows(text: str) -> dict:
    lines = [json.loads(line) for line in text.splitlines()]
    return {key: [line[key] for line in lines] for key in lines[0]}


@pytest.mark.slow
@pytest.mark.parametrize("late", [False, True], ids=["naive", "late"])
def test_rows_equal_embed_chunks_in_every_format(job, minilm_dir, late):
    cwd, model = job
    docs = documents()
    want = expected_rows(docs, CHUNKS, minilm_dir, late=late)
    assert len(set(want["id"].tolist())) == 5 and want["start"].max() > 1000  # past 256 tokens
    flags = ["--chunks", CHUNKS, "--chunk-text", "--part-size", "2", *model,
             *(["--late"] if late else [])]  # fmt: skip
    name = "late" if late else "naive"

    run = poolkit("embed", "docs.jsonl", "-o", f"{name}.parquet", *flags, cwd=cwd)
    assert run.returncode == 0, run.stderr.decode()
    rows = parquet_rows(cwd / f"{name}.parquet")
    assert list(rows) == ["id", "chunk", "start", "end", "text", "mean"]
    check_rows(rows, want, docs)
    record = json.loads(pq.read_schema(cwd / f"{name}.parquet").metadata[b"poolkit"])
    assert record["chunks"]["chunker"] == CHUNKS and record["chunks"]["late"] is late
    err = run.stderr.decode().splitlines()
    assert err[0].startswith(f"poolkit: 5 documents -> {len(want['id'])} chunks -> {name}.parquet "
                             "[mean=384] in ")  # fmt: skip
    assert len(err) == 1

    streamed = poolkit("embed", "-", "--input-format", "jsonl", "-o", "-", *flags, cwd=cwd,
                       stdin=(cwd / "docs.jsonl").read_bytes())  # fmt: skip
    assert streamed.returncode == 0, streamed.stderr.decode()
    check_rows(jsonl_rows(streamed.stdout.decode()), want, docs)

    if not late:  # .jsonl: the same lines as -o -, and the record beside them
        run = poolkit("embed", "docs.jsonl", "-o", "naive.jsonl", *flags, cwd=cwd)
        assert run.returncode == 0, run.stderr.decode()
        assert (cwd / "naive.jsonl").read_bytes() == streamed.stdout
        record = json.loads((cwd / "naive.jsonl.poolkit.json").read_text())
        assert record["chunks"]["columns"] == ["id", "chunk", "start", "end", "text"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")  # the reference's
def test_column_spans_from_jsonl_and_csv(tmp_path, minilm_dir):
    docs = ["Hello world. Bye now.", "Second doc.", long_documents(1)[0]]
    spans = [[[0, 12], [13, 21]], [[0, 6]], [[0, 40], [41, len(docs[2])]]]  # past 256 tokens
    write_jsonl(tmp_path / "docs.jsonl", [{"text": d, "spans": s} for d, s in
                                          zip(docs, spans, strict=True)])  # fmt: skip
    with open(tmp_path / "docs.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["text", "spans"], *([d, json.dumps(s)] for d, s in
                                                      zip(docs, spans, strict=True))])  # fmt: skip
    want = expected_rows(docs, spans, minilm_dir)
    for name in ("docs.jsonl", "docs.csv"):
        run = poolkit("embed", name, "-o", f"{name}.parquet", "--chunks", "column:spans",
                      "--model", str(minilm_dir), cwd=tmp_path)  # fmt: skip
        assert run.returncode == 0, run.stderr.decode()
        rows = parquet_rows(tmp_path / f"{name}.parquet")
        assert list(rows) == ["id", "chunk", "start", "end", "mean"]
        check_rows(rows, want, docs)
        # The 1504-character chunk is longer than the model reads: cut, and counted.
        assert "5 chunks" in run.stderr.decode() and ", 1 truncated (" in run.stderr.decode()


def _parts(work: Path) -> int:
    return len(list(work.glob("chunk-*.npz"))) if work.is_dir() else 0


@pytest.mark.slow
def test_killed_after_the_first_part_then_resumed_is_byte_identical(tmp_path, minilm_dir):
    write_jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in long_documents(6)])
    flags = ["--chunks", CHUNKS, "--chunk-text", "--part-size", "1", "--model", str(minilm_dir)]
    clean = poolkit("embed", "docs.jsonl", "-o", "clean.parquet", *flags, cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr.decode()

    argv = command("embed", "docs.jsonl", "-o", "out.parquet", *flags)
    proc = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE)
    work = tmp_path / "out.parquet.poolkit-work"
    deadline = time.monotonic() + 240
    try:
        while _parts(work) < 1:
            assert proc.poll() is None, f"finished before the kill: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the first part never came"
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL and not (tmp_path / "out.parquet").exists()
    kept = _parts(work)
    assert 1 <= kept < 6

    # Other chunk settings: refused, naming them; the work directory stays as it was.
    other = poolkit("embed", "docs.jsonl", "-o", "out.parquet", *flags, "--late", "--resume",
                    cwd=tmp_path)  # fmt: skip
    one_error_line(other, 2, "Expected the settings the checkpoint was made with, but they differ",
                   "chunks: ")  # fmt: skip
    assert _parts(work) == kept

    resumed = poolkit("embed", "docs.jsonl", "-o", "out.parquet", *flags, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "clean.parquet").read_bytes()
    err = resumed.stderr.decode()
    assert f"; {kept} document{'s' * (kept > 1)} resumed from the checkpoint" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.parquet", "docs.jsonl",
                                                          "out.parquet"]  # fmt: skip


REFUSED = [
    (["--chunks", "tokens:0"], "Expected --chunks to be tokens:SIZE with SIZE >= 1, but got tokens:0."),
    (["--chunks", "tokens:8:8"], "Expected --chunks to be an OVERLAP from 0 to SIZE - 1 = 7, but got tokens:8:8."),
    (["--chunks", "words"], "Expected --chunks to be tokens:SIZE[:OVERLAP], sentences or column:NAME, but got 'words'."),
    (["--late"], "--late: only with --chunks (one row per chunk of each text); add --chunks"),
    (["--stride", "64"], "--stride: only with --chunks"),
    (["--chunk-text"], "--chunk-text: only with --chunks"),
    (["--chunks", "tokens:32", "--stride", "64"], "--stride: the window step of late chunks; add --late, or drop --stride."),
    (["--chunks", "tokens:32", "--late", "--stride", "0"], "Expected --stride to be a positive integer, but got 0."),
    (["--chunks", "tokens:32", "--long-text", "window"], "--long-text window: with --chunks"),
    (["--chunks", "sentences", "-o", "out.npy"], "out.npy: --chunks writes one row per chunk with its document id and span, which a .npy matrix cannot hold; write .parquet or .jsonl."),
    (["--chunks", "column:spans", "--engine", "ray", "-o", "folder"], "--chunks column:spans: the spans of a field are read on one machine only; use tokens:SIZE or sentences, or run without --engine ray."),
    (["--chunks", "column:spans", "--input-format", "txt"], "docs.jsonl: Expected a column 'spans' to read, but a .txt input has no columns"),
    (["--chunks", "column:spans"], 'docs.jsonl: line 1: Expected a "spans" field, but its fields are: text.'),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "message"), REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_refused_before_the_model_loads(tmp_path, flags, message):
    write_jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in documents()])
    output = [] if "-o" in flags else ["-o", "out.parquet"]
    result = poolkit("embed", "docs.jsonl", *output, *flags, cwd=tmp_path)
    one_error_line(result, 2, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]


@pytest.mark.slow
def test_refused_once_the_model_is_known(tmp_path, minilm_dir):
    model = ["--model", str(minilm_dir)]
    write_jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in documents()])
    too_big = poolkit("embed", "docs.jsonl", "-o", "out.parquet", "--chunks", "tokens:9999",
                      *model, cwd=tmp_path)  # fmt: skip
    one_error_line(too_big, 2, "--chunks tokens:9999: a chunk holds at most 254 tokens with this "
                   "model (it reads 256, 2 of them special); use tokens:254 or less.")  # fmt: skip
    cls = poolkit("embed", "docs.jsonl", "-o", "out.parquet", "--chunks", "sentences", "--late",
                  "-s", "cls", *model, cwd=tmp_path)  # fmt: skip
    one_error_line(cls, 2, "Expected --recipe/--strategy to be a strategy that pools a late "
                   "chunk's tokens", "or drop --late.")  # fmt: skip

    # A span outside its text: the line of the input, the id, the field named.
    write_jsonl(tmp_path / "spans.jsonl", [{"text": "Hello world.", "spans": [[0, 5]]},
                                           {"text": "Short", "spans": [[0, 5], [6, 99]]}])  # fmt: skip
    (tmp_path / "spans.jsonl").write_text("\n" + (tmp_path / "spans.jsonl").read_text())
    bad = poolkit("embed", "spans.jsonl", "-o", "out.parquet", "--chunks", "column:spans",
                  *model, cwd=tmp_path)  # fmt: skip
    one_error_line(bad, 2, "spans.jsonl: line 3 (id 1): Expected `spans[1]` to be (start, end) "
                   "with 0 <= start < end <= len(text) = 5, but got (6, 99).")  # fmt: skip

    # An empty document gives no chunk: refused, naming its line and id. In the first part:
    # nothing is left; in a later one: the finished parts are kept for --resume, no output.
    write_jsonl(tmp_path / "blank.jsonl", [{"text": " "}, {"text": "Fine."}])
    blank = poolkit("embed", "blank.jsonl", "-o", "out.parquet", "--chunks", "sentences",
                    *model, cwd=tmp_path)  # fmt: skip
    one_error_line(blank, 2, "blank.jsonl: line 1 (id 0): an empty document (empty or "
                   "whitespace only) gives no chunk; remove it from INPUT.")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.jsonl", "docs.jsonl",
                                                          "spans.jsonl"]  # fmt: skip
    write_jsonl(tmp_path / "late.jsonl", [{"text": "One."}, {"text": "Two."}, {"text": ""}])
    late = poolkit("embed", "late.jsonl", "-o", "out.parquet", "--chunks", "sentences",
                   "--part-size", "1", *model, cwd=tmp_path)  # fmt: skip
    one_error_line(late, 2, "late.jsonl: line 3 (id 2): an empty document", "(2 finished parts "
                   "are kept in out.parquet.poolkit-work; fix the problem and rerun with --resume.)")  # fmt: skip
    assert not (tmp_path / "out.parquet").exists()
