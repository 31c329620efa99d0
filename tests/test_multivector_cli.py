"""``poolkit embed`` with a multi-vector recipe: the ragged outputs (``.npz``, ``.parquet``,
``.jsonl``) hold ``poolkit.embed``'s token vectors, an interrupted job resumes to the same
bytes, and bad input gets one line, exit 2, and nothing written."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import clitools
import numpy as np
import pyarrow.parquet as pq
import pytest
from tiny_models import build_multivector

import poolkit
from poolkit.cli import _multivector

TEXTS = [
    "Cats sleep sixteen hours a day.",
    "The dog, barked!",
    "Paris is the capital of France; it is large, old and beautiful, with many museums.",
    "A man is playing a guitar.",
    "Représentation des phrases — naïve café.",
    "How do cats sleep?",
    "Pooling turns token vectors into one vector per text.",
]
RECIPE = "multivector:tokens/pool2"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("multivector_cli")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_multivector("bert_dense", cwd / "model")
    (cwd / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return cwd


def embed(cwd: Path, output: str, *extra: str):
    return clitools.poolkit("embed", "in.txt", "-o", output, "--model", "model", "--recipe",
                            RECIPE, "--part-size", "3", "--quiet", *extra, cwd=cwd)  # fmt: skip


def read_ragged(path: Path, column: str = RECIPE) -> tuple[list[int], list[np.ndarray]]:
    """(ids, one (tokens, D) array per text) of a ragged output, read by hand."""
    if path.suffix == ".npz":
        z = np.load(path)
        o = z["offsets"]
        return z["ids"].tolist(), [z["vectors"][o[i] : o[i + 1]] for i in range(len(z["ids"]))]
    if path.suffix == ".parquet":
        t = pq.read_table(path)
        col = t.column(column).to_pylist()
        return t.column("id").to_pylist(), [np.asarray(v, np.float32) for v in col]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["id"] for r in rows], [np.asarray(r[column], np.float32) for r in rows]


@pytest.mark.parametrize("fmt", ["npz", "parquet", "jsonl"])
@pytest.mark.parametrize("side", ["query", "document"])
def test_ragged_output_holds_the_library_vectors(job, fmt, side):
    out = f"{side}.{fmt}"
    result = embed(job, out, "--prompt-name", side, "--overwrite")
    assert result.returncode == 0, result.stderr.decode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = poolkit.embed(TEXTS, model=job / "model", recipe=RECIPE, prompt_name=side)
    ids, got = read_ragged(job / out)
    assert ids == list(range(len(TEXTS)))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("fmt", ["npz", "parquet", "jsonl"])
def test_packed_bits_per_token_are_stored_as_packed(job, fmt):
    out = f"bits.{fmt}"
    result = embed(job, out, "--precision", "binary", "--overwrite")
    assert result.returncode == 0, result.stderr.decode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = poolkit.embed(TEXTS, model=job / "model", recipe=RECIPE + "/binary")
    _, got = read_ragged(job / out, RECIPE + "/binary")
    for a, b in zip(got, want, strict=True):  # 16 dimensions: 2 bytes a token
        assert b.dtype == np.int8 and b.shape[1] == 2
        np.testing.assert_array_equal(a, b)


def test_muvera_recipe_writes_one_vector_per_text(job):
    muvera = "multivector:tokens/muvera:k_sim=3,dim_proj=8,r_reps=2"
    result = clitools.poolkit("embed", "in.txt", "-o", "m.npy", "--model", "model", "--recipe",
                              muvera, "--quiet", cwd=job)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = poolkit.embed(TEXTS, model=job / "model", recipe=muvera)
    np.testing.assert_allclose(np.load(job / "m.npy"), want, atol=1e-5)


@pytest.mark.parametrize("fmt", ["npz", "parquet", "jsonl"])
def test_interrupted_job_resumes_to_the_same_bytes(job, fmt, monkeypatch):
    clean = embed(job, f"clean.{fmt}")
    assert clean.returncode == 0, clean.stderr.decode()
    calls = []
    real = _multivector.MultivectorPart.embed

    def interrupted(self, *args, **kwargs):  # Ctrl-C while the second part is embedded
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(_multivector.MultivectorPart, "embed", interrupted)
    stopped = embed(job, f"resumed.{fmt}")
    assert stopped.returncode == 130, stopped.stderr.decode()
    assert not (job / f"resumed.{fmt}").exists()
    monkeypatch.setattr(_multivector.MultivectorPart, "embed", real)
    resumed = embed(job, f"resumed.{fmt}", "--resume")
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (job / f"resumed.{fmt}").read_bytes() == (job / f"clean.{fmt}").read_bytes()
    assert not (job / f"resumed.{fmt}.poolkit-work").exists()


def _reference_offsets(folder: Path, text: str, prompt: str, length: int, skip: bool) -> list:
    """The tokenizer's offset_mapping of ``prompt + text`` cut at ``length`` tokens, made
    relative to ``text`` (special tokens and tokens ending inside the prompt: ``[0, 0]``);
    ``skip``: punctuation tokens dropped (a document's skiplist)."""
    import string

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    enc = tok(prompt + text, return_offsets_mapping=True, truncation=True, max_length=length,
              return_special_tokens_mask=True)  # fmt: skip
    skipped = {i for i in tok.convert_tokens_to_ids(list(string.punctuation))
               if i != tok.unk_token_id} if skip else set()  # fmt: skip
    out, n = [], len(prompt)
    for i, (a, b), special in zip(enc["input_ids"], enc["offset_mapping"],
                                  enc["special_tokens_mask"], strict=True):  # fmt: skip
        if i in skipped:
            continue
        out.append([0, 0] if special or b <= n else [max(a - n, 0), b - n])
    return out


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_token_offsets_are_the_tokenizers(job, tmp_path, fmt):
    from tiny_models import build_family

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = build_family("xlmr", tmp_path / "xlmr")  # a plain encoder, prompts query/passage
    (tmp_path / "in.txt").write_text((job / "in.txt").read_text(), encoding="utf-8")
    cases = [  # (model, side, prompt, length, skiplist)
        (job / "model", "document", "[D] ", 20, True),
        (plain, "query", "query: ", 24, False),
    ]
    for k, (model, side, prompt, length, skip) in enumerate(cases):
        out = tmp_path / f"o{k}.{fmt}"
        result = clitools.poolkit("embed", "in.txt", "-o", out.name, "--model", str(model),
                                  "--recipe", "multivector:tokens/8", "--prompt-name", side,
                                  "--token-offsets", "--part-size", "3", "--quiet", cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        if fmt == "parquet":
            table = pq.read_table(out)
            assert table.column_names == ["id", "offsets", "multivector:tokens/8"]
            got, vectors = table.column("offsets").to_pylist(), table.column(2).to_pylist()
        else:
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            assert list(rows[0]) == ["id", "offsets", "multivector:tokens/8"]
            got = [r["offsets"] for r in rows]
            vectors = [r["multivector:tokens/8"] for r in rows]
        for text, offsets, vecs in zip(TEXTS, got, vectors, strict=True):
            assert offsets == _reference_offsets(model, text, prompt, length, skip), text
            assert len(offsets) == len(vecs)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["-o", "bad.npy", "--recipe", RECIPE], ["bad.npy", "Write .npz"]),
        (["-o", "bad.npz", "--recipe", "mean"], ["Expected an output for dense vectors", ".npz is for sparse recipes", "multi-vector"]),
        (["-o", "bad.npz", "--recipe", "multivector:tokens/pool0.5"], ["a number >= 1"]),
        (["-o", "bad.npy", "--recipe", "multivector:tokens/muvera:dim_proj=32"],
         ["dim_proj", "at most the token width 16"]),
        (["-o", "bad.npz", "--recipe", RECIPE, "--exclude-special"], ["--exclude-special"]),
        (["-o", "bad.npz", "--recipe", RECIPE, "--pooled-only"], ["--pooled-only"]),
        (["-o", "bad.npz", "--recipe", RECIPE, "--long-text", "window"], ["--long-text window"]),
        (["-o", "bad.npz", "--recipe", RECIPE, "mean"], ["one job each"]),
        (["-o", "bad.npz", "--recipe", RECIPE, "--prompt-name", "passage"], ["--prompt-name"]),
        (["-o", "bad.parquet", "--recipe", "multivector:tokens/int8"], ["--recipe", "/binary"]),
        (["-o", "bad.npz", "--recipe", RECIPE, "--precision", "uint8"], ["--precision", "/binary"]),
        (["-o", "bad.parquet", "--recipe", RECIPE, "--token-offsets"],
         ["--token-offsets", "merged tokens"]),
        (["-o", "bad.npy", "--recipe", "multivector:tokens/muvera", "--token-offsets"],
         ["--token-offsets", "one vector per text"]),
        (["-o", "bad.npz", "--recipe", "multivector:tokens", "--token-offsets"],
         ["--token-offsets", "write .parquet or .jsonl"]),
        (["-o", "bad.parquet", "--recipe", "mean", "--token-offsets"],
         ["--token-offsets", "multi-vector recipe"]),
        (["-o", "shards", "--recipe", "multivector:tokens", "--token-offsets", "--engine", "ray"],
         ["--token-offsets", "no --token-offsets on --engine ray"]),
    ],
)  # fmt: skip
def test_bad_input_one_line_exit_2_nothing_written(job, args, fragments):
    before = sorted(p.name for p in job.iterdir())
    result = clitools.poolkit("embed", "in.txt", "--model", "model", *args, cwd=job)
    clitools.one_error_line(result, 2, *fragments)
    assert sorted(p.name for p in job.iterdir()) == before


def test_compare_refuses_multivector_rows_outside_retrieval(job):
    sample = Path(__file__).parent / "data" / "stsb-dev-sample.csv"
    result = clitools.poolkit("compare", "--task", "sts", str(sample), "--model", "model",
                              "--recipes", RECIPE, cwd=job)  # fmt: skip
    err = result.stderr.decode()  # (a note first: the tiny folder states no pooling)
    assert result.returncode == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(
        "poolkit: error: Expected --recipes to be recipes for --task sts, but got "
        "multivector:tokens/pool2"
    )
    assert "--task retrieval" in err.splitlines()[-1]
