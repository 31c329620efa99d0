"""End to end: the real `poolkit` CLI as a subprocess, on real files, with the real model."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from clitools import one_error_line, poolkit

pytestmark = pytest.mark.slow

TEXTS = ["John works at Google", "A cat sat on the mat.", "hello world"]


@pytest.fixture(scope="module")
def reference(minilm_st) -> np.ndarray:
    return minilm_st.encode(TEXTS, convert_to_numpy=True)


def test_embed_txt_to_npy_matches_sentence_transformers(tmp_path, reference):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = poolkit("embed", "in.txt", "-o", "out.npy", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    summary = result.stderr.decode()
    assert "poolkit: 3 texts -> out.npy [mean=384]" in summary and "0 truncated" in summary
    out = np.load(tmp_path / "out.npy")
    assert out.dtype == np.float32 and np.abs(out - reference).max() < 1e-5
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.txt",
        "out.npy",
        "out.npy.poolkit.json",
    ]

    again = poolkit("embed", "in.txt", "-o", "out.npy", cwd=tmp_path)
    one_error_line(again, 2, "out.npy: already exists; pass --overwrite")
    assert np.array_equal(np.load(tmp_path / "out.npy"), out)
    assert (
        poolkit("embed", "in.txt", "-o", "out.npy", "--overwrite", "-q", cwd=tmp_path).returncode
        == 0
    )


def test_formats_columns_and_strategies(tmp_path, reference):
    rows = [{"id": i, "body": t} for i, t in enumerate(TEXTS)]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    (tmp_path / "in.csv").write_text(
        "n,body\n" + "\n".join(f'{i},"{t}"' for i, t in enumerate(TEXTS))
    )
    r = poolkit("embed", "in.jsonl", "--text-column", "body", "-o", "o.parquet",
                "-s", "mean", "cls+mean", "--no-normalize", "--part-size", "2", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.column_names == ["id", "mean", "cls+mean"] and table["id"].to_pylist() == [0, 1, 2]
    mean = np.array(table["mean"].to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(
        mean / np.linalg.norm(mean, axis=1, keepdims=True), reference, atol=1e-5
    )
    np.testing.assert_allclose(np.array(table["cls+mean"].to_pylist())[:, 384:], mean, atol=1e-6)

    r = poolkit("embed", "in.csv", "--text-column", "body", "-o", "o.jsonl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == [0, 1, 2]
    assert np.abs(np.array([x["mean"] for x in lines]) - reference).max() < 1e-5

    r = poolkit("embed", "-", "-o", "stdin.npy", cwd=tmp_path, stdin="\n".join(TEXTS).encode())
    assert r.returncode == 0 and np.abs(np.load(tmp_path / "stdin.npy") - reference).max() < 1e-5


def test_input_errors_are_one_line_exit_2(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bad.txt").write_bytes(b"fine\nalso fine\n\xff\xfe broken\n")
    (tmp_path / "two.csv").write_text("a,b\n1,2\n")
    (tmp_path / "ok.txt").write_text("a\nb\n")
    one_error_line(
        poolkit("embed", "missing.txt", "-o", "o.npy", cwd=tmp_path),
        2,
        "missing.txt: Expected an input file, but there is no such file",
    )
    one_error_line(
        poolkit("embed", "empty.txt", "-o", "o.npy", cwd=tmp_path),
        2,
        "Expected texts, but the input is empty",
    )
    one_error_line(
        poolkit("embed", "bad.txt", "-o", "o.npy", cwd=tmp_path),
        2,
        "line 3: Expected UTF-8 text, but it is not valid UTF-8",
    )
    one_error_line(
        poolkit("embed", "two.csv", "-o", "o.npy", cwd=tmp_path), 2, "its columns are: a, b"
    )
    one_error_line(poolkit("embed", "two.csv", "--text-column", "c", "-o", "o.npy", cwd=tmp_path),
                   2, "Expected --text-column to be a column of the input, but got 'c'. Its columns: a, b")  # fmt: skip
    one_error_line(poolkit("embed", "ok.txt", "-o", "o.npy", "-s", "avg", cwd=tmp_path),
                   2, "one of cls, mean, max, min, sum, mean_sqrt_len, weighted_mean, last")  # fmt: skip
    one_error_line(poolkit("embed", "ok.txt", "-o", "o.npy", "-s", "cls", "mean", cwd=tmp_path),
                   2, "Write .parquet or .jsonl instead")  # fmt: skip
    one_error_line(poolkit("embed", "ok.txt", "-o", "o.npy", "--model", "nobody/nothing-xyz", cwd=tmp_path),
                   2, "pass the path of a local model directory")  # fmt: skip
    one_error_line(
        poolkit("embed", "ok.txt", "-o", "o.csv", cwd=tmp_path), 2, ".npy, .parquet, .jsonl"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.txt",
        "empty.txt",
        "ok.txt",
        "two.csv",
    ]
    debug = poolkit("embed", "missing.txt", "-o", "o.npy", "--debug", cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback" in debug.stderr.decode()


def test_no_half_written_output_when_a_later_chunk_fails(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"one\ntwo\nthree\n\xff\n")
    r = poolkit("embed", "in.txt", "-o", "o.parquet", "--part-size", "1", cwd=tmp_path)
    one_error_line(
        r,
        2,
        "line 4: Expected UTF-8 text, but it is not valid UTF-8",
        "3 finished parts are kept",
        "--resume",
    )
    # No OUTPUT; the finished parts wait in the work directory (see test_resume.py).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "o.parquet.poolkit-work"]


def test_truncation_in_summary(tmp_path):
    (tmp_path / "in.txt").write_text("short\n" + "word " * 300 + "\n")
    r = poolkit("embed", "in.txt", "-o", "o.npy", cwd=tmp_path)
    assert r.returncode == 0 and "1 truncated (longer than 256 tokens" in r.stderr.decode()


def test_inspect(tmp_path, tiny_dirs):
    r = poolkit("inspect", cwd=tmp_path)
    out = r.stdout.decode()
    assert r.returncode == 0
    assert "pooling       mean (1_Pooling/config.json: pooling_mode_mean_tokens)" in out
    assert "normalize     yes (modules.json: Normalize module)" in out
    assert "max length    256 (sentence_bert_config.json: max_seq_length)" in out
    r = poolkit("inspect", str(tiny_dirs["gpt2_left"]), "--json", cwd=tmp_path)
    info = json.loads(r.stdout)
    assert (info["pooling"], info["pooling_is_guess"], info["padding_side"]) == (
        "last",
        True,
        "left",
    )
    one_error_line(poolkit("inspect", "./nowhere", cwd=tmp_path), 2, "is not a directory")


def test_inspect_takes_the_model_as_every_command_does(tmp_path, tiny_dirs):
    model = str(tiny_dirs["gpt2_left"])
    outputs = []
    for argv in (["--model", model], ["-m", model], [model]):  # the positional: old spelling
        result = poolkit("inspect", *argv, "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        outputs.append(json.loads(result.stdout))
    assert outputs[0]["pooling"] == "last" and outputs[0]["padding_side"] == "left"
    assert outputs[0] == outputs[1] == outputs[2]
    line = one_error_line(poolkit("inspect", "-m", model, "./other", cwd=tmp_path), 2)
    assert line == (
        f"poolkit: error: Expected --model to be given once, but got both --model {model} "
        "and MODEL ./other. Drop MODEL (the old spelling).\n"
    )


def test_tokens_and_spans(tmp_path, minilm):
    r = poolkit("tokens", "--text", "John works at Google", cwd=tmp_path)
    (obj,) = [json.loads(x) for x in r.stdout.decode().splitlines()]
    assert obj["tokens"] == ["john", "works", "at", "google"]
    assert obj["offsets"] == [[0, 4], [5, 10], [11, 13], [14, 20]]
    (b,) = list(minilm.iter_batches(["John works at Google"]))
    h = b.hidden[0].numpy()
    np.testing.assert_allclose(np.array(obj["vectors"]), h[1:5], atol=1e-5)

    (tmp_path / "spans.jsonl").write_text(
        json.dumps({"text": "John works at Google", "spans": [[11, 20]]})
    )
    r = poolkit("spans", "spans.jsonl", "-o", "s.jsonl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    (obj,) = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    (span,) = obj["spans"]
    assert (span["token_start"], span["token_end"], span["tokens"]) == (3, 4, ["at", "google"])
    np.testing.assert_allclose(span["vector"], np.concatenate([h[3], h[4]]), atol=1e-5)
    one_error_line(poolkit("spans", "--text", "John works", "--span", "4:5", cwd=tmp_path),
                   2, "Expected `char_spans[0][0]` to be a span that covers at least one token "
                   "of texts[0], but got (4, 5), which covers none")  # fmt: skip
    # the spans input goes through the readers' line decoding: NUL bytes and bad UTF-8 named
    (tmp_path / "nul.jsonl").write_bytes(b'{"text": "a b", "spans": [[0, 1]]}\n{"text": "\x00"}\n')
    one_error_line(
        poolkit("spans", "nul.jsonl", cwd=tmp_path),
        2,
        "line 2: Expected UTF-8 text, but it contains a NUL byte",
    )
    (tmp_path / "latin.jsonl").write_bytes(b'{"text": "caf\xe9", "spans": [[0, 1]]}\n')
    one_error_line(
        poolkit("spans", "latin.jsonl", cwd=tmp_path),
        2,
        "line 1: Expected UTF-8 text, but it is not valid UTF-8",
    )


def test_resume_with_another_batch_budget_is_refused(tmp_path):
    """The manifest records the budget actually used (it recorded the Encoder's default
    whatever --batch-tokens said, so a resume with another budget went unnoticed)."""
    (tmp_path / "in.txt").write_bytes(b"one text\ntwo text\n\xff bad\n")
    first = poolkit("embed", "in.txt", "-o", "o.npy", "--part-size", "2", "--batch-tokens",
                    "512", cwd=tmp_path)  # fmt: skip
    one_error_line(
        first,
        2,
        "line 3: Expected UTF-8 text, but it is not valid UTF-8",
        "1 finished part is kept",
    )
    manifest = json.loads((tmp_path / "o.npy.poolkit-work" / "manifest.json").read_text())
    assert manifest["settings"]["batch_tokens"] == 512
    assert manifest["settings"]["recipes"] == ["mean"]
    (tmp_path / "in.txt").write_bytes(b"one text\ntwo text\nthree\n")  # the bad line fixed
    again = poolkit("embed", "in.txt", "-o", "o.npy", "--part-size", "2", "--batch-tokens",
                    "1024", "--resume", cwd=tmp_path)  # fmt: skip
    one_error_line(again, 2, "batch_tokens: 512 then, 1024 now")
    done = poolkit("embed", "in.txt", "-o", "o.npy", "--part-size", "2", "--batch-tokens",
                   "512", "--resume", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert np.load(tmp_path / "o.npy").shape == (3, 384)
