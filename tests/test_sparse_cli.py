"""``poolkit embed --recipe splade``: .npz, Parquet and JSON Lines give back the library's
CSR array; a job stopped after a part and resumed writes the same bytes; bad input gets
one line, exit 2 and no file. In-process, on a tiny random BertForMaskedLM."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from clitools import one_error_line, poolkit
from equality import assert_same_bits, assert_sparse_within_bound, assert_within_bound
from tiny_models import build_mlm

import poolkit as pk

pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")

TEXTS = ["John works at Google in London.", "a cat", "The quick brown fox jumps.",
         "Pooling turns token vectors into one vector per text.", "one more", "last"]  # fmt: skip


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_mlm("bert_dense", tmp_path_factory.mktemp("mlm") / "bert"))


@pytest.fixture
def work(tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return tmp_path


def _csr_from_parquet(path, name: str, width: int) -> sp.csr_array:
    table = pq.read_table(path)
    ids, values = table[f"{name}_indices"].to_pylist(), table[f"{name}_values"].to_pylist()
    rows = [np.full(len(i), r) for r, i in enumerate(ids)]
    flat = (np.concatenate(values), (np.concatenate(rows), np.concatenate(ids)))
    return sp.csr_array(flat, shape=(len(ids), width), dtype=np.float32)


def _csr_from_jsonl(lines: list[str], name: str, width: int) -> sp.csr_array:
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == list(range(len(rows)))
    dense = np.zeros((len(rows), width), np.float32)
    for k, r in enumerate(rows):
        dense[k, r[name]["indices"]] = r[name]["values"]
    return sp.csr_array(dense)


@pytest.mark.parametrize("recipe", ["splade", "splade_sum/top8"])
def test_every_format_round_trips_to_the_library_vectors(work, mlm, recipe) -> None:
    want = pk.embed(TEXTS, model=mlm, recipe=recipe)
    width = want.shape[1]
    for ext in ("npz", "parquet", "jsonl"):
        r = poolkit("embed", "in.txt", "-o", f"out.{ext}", "--recipe", recipe, "--model", mlm,
                    "--part-size", "4", "-q", cwd=work)  # fmt: skip
        assert r.returncode == 0, r.stderr
    got = {
        "npz": sp.load_npz(work / "out.npz"),
        "parquet": _csr_from_parquet(work / "out.parquet", recipe, width),
        "jsonl": _csr_from_jsonl((work / "out.jsonl").read_text().splitlines(), recipe, width),
    }
    # The formats hold the same bits; against the library's one batch (parts of 4 batch
    # otherwise) they meet the bound of docs/equality.md, top-k cuts included.
    for ext, vec in got.items():
        assert_same_bits(vec, got["npz"], ext)
        if "/top" in recipe:
            assert_sparse_within_bound(vec, want, int(recipe.rsplit("top", 1)[1]), ext)
        else:
            assert_within_bound(vec, want, ext)
    meta = json.loads(pq.read_schema(work / "out.parquet").metadata[b"poolkit"])
    assert meta["columns"][recipe]["recipe"] == recipe
    side = json.loads((work / "out.npz.poolkit.json").read_text())
    assert side["columns"][recipe]["vocab_size"] == width
    # One part (the default --part-size) batches as the library's call: the same bits, and
    # standard output holds the bytes of the file the same job writes.
    whole = poolkit("embed", "in.txt", "-o", "whole.jsonl", "--recipe", recipe, "--model", mlm,
                    "-q", cwd=work)  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    stdout = poolkit("embed", "in.txt", "-o", "-", "--recipe", recipe, "--model", mlm, "-q",
                     cwd=work)  # fmt: skip
    assert stdout.returncode == 0, stdout.stderr
    assert stdout.stdout == (work / "whole.jsonl").read_bytes()
    lines = stdout.stdout.decode().splitlines()
    assert_same_bits(_csr_from_jsonl(lines, recipe, width), want, "one part = the library")


@pytest.mark.parametrize("ext", ["npz", "parquet", "jsonl"])
def test_stopped_and_resumed_gives_the_same_bytes(work, mlm, ext) -> None:
    args = ["--recipe", "splade/top16", "--model", mlm, "--part-size", "2", "-q"]
    ref = poolkit("embed", "in.txt", "-o", f"ref.{ext}", *args, cwd=work)
    assert ref.returncode == 0, ref.stderr
    good = (work / "in.txt").read_bytes()
    (work / "in.txt").write_bytes(good.replace(b"one more", b"\xff bad"))  # stops in part 2
    first = poolkit("embed", "in.txt", "-o", f"out.{ext}", *args, cwd=work)
    assert first.returncode == 2 and "finished part" in first.stderr.decode()
    assert not (work / f"out.{ext}").exists()
    (work / "in.txt").write_bytes(good)
    again = poolkit("embed", "in.txt", "-o", f"out.{ext}", *args, "--resume", cwd=work)
    assert again.returncode == 0, again.stderr
    assert (work / f"out.{ext}").read_bytes() == (work / f"ref.{ext}").read_bytes()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["-o", "x.npy", "--recipe", "splade"],
            [
                "Expected an output for sparse vectors",
                "a .npy file holds dense vectors",
                "Write .npz",
            ],
        ),
        (["-o", "x.npz", "--recipe", "splade/top0"], ["--recipe", "positive number"]),
        (["-o", "x.npz", "--recipe", "splade", "--dims", "8"], ["--dims", "/topK"]),
        (["-o", "x.npz", "--recipe", "splade", "--precision", "int8"], ["--precision", "/topK"]),
        (["-o", "x.npz", "--recipe", "mean"], [".npz is for sparse recipes"]),
        (["-o", "x.npz", "--recipe", "splade", "mean"], ["separate runs"]),
        (["-o", "x.parquet", "--recipe", "splade", "--chunks", "tokens:8"], ["--chunks"]),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(work, mlm, args, fragments) -> None:
    r = poolkit("embed", "in.txt", "--model", mlm, *args, cwd=work)
    one_error_line(r, 2, *fragments)
    assert sorted(p.name for p in work.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("engine", [[], ["--engine", "ray"]])
def test_a_model_without_mlm_head_is_refused_naming_the_head(work, tiny_dirs, engine) -> None:
    if engine:  # refused before Ray starts, from the folder's config
        pytest.importorskip("ray")
    out = "x" if engine else "x.npz"  # Ray writes a folder
    r = poolkit("embed", "in.txt", "-o", out, "--recipe", "splade", "--model",
                str(tiny_dirs["bert_plain"]), *engine, cwd=work)  # fmt: skip
    one_error_line(r, 2, "masked-language-model head", "ForMaskedLM", "BertModel")
    assert sorted(p.name for p in work.iterdir()) == ["in.txt"]
