"""``poolkit embed``'s rows as the user names them (the tiny BERT, in-process): the input's
ids in every output (type kept, chunks included), refused when duplicate or missing;
``--keep-columns``; a BEIR folder read as ``compare`` reads it; the provenance record
beside every output; progress lines where stderr is not a terminal."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import poolkit
from poolkit.cli import main
from poolkit.cli._progress import PlainProgress

TEXTS = ["John works at Google", "A cat sat on the mat.", "hello world", "Paris in spring"]


@pytest.fixture
def model(tiny_dirs) -> list[str]:
    return ["--model", str(tiny_dirs["bert_plain"]), "-s", "mean"]


def _jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _error(capfd) -> str:
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("poolkit: error: "), err
    return err


def test_string_and_integer_ids_keep_their_type(model, tmp_path, capfd):
    src = tmp_path / "in.jsonl"
    _jsonl(src, [{"id": f"doc-{k}", "text": t} for k, t in enumerate(TEXTS)])
    assert main(["embed", str(src), "-o", str(tmp_path / "s.parquet"), "--quiet", *model]) == 0
    table = pq.read_table(tmp_path / "s.parquet")
    assert table.schema.field("id").type == pa.string()
    assert table.column("id").to_pylist() == [f"doc-{k}" for k in range(4)]
    _jsonl(src, [{"id": 4983 + k, "text": t} for k, t in enumerate(TEXTS)])
    assert main(["embed", str(src), "-o", str(tmp_path / "i.jsonl"), "--quiet", *model]) == 0
    rows = [json.loads(x) for x in (tmp_path / "i.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [4983, 4984, 4985, 4986]
    # The vectors are those of the texts, whatever their ids.
    np.testing.assert_allclose(
        np.array([r["mean"] for r in rows], np.float32),
        np.asarray(table.column("mean").to_pylist(), np.float32), atol=1e-6,
    )  # fmt: skip


def test_parquet_id_column_with_chunks_and_a_npy_record(model, tmp_path, capfd):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"_id": ["a", "b", "c", "d"], "text": TEXTS}), src)
    out = tmp_path / "c.parquet"
    assert main(["embed", str(src), "-o", str(out), "--chunks", "tokens:2", "--quiet",
                 "--part-size", "3", *model]) == 0  # fmt: skip
    table = pq.read_table(out)
    ids, chunks = table.column("id").to_pylist(), table.column("chunk").to_pylist()
    # Each document's chunks carry its id, numbered from 0 within it.
    assert sorted(set(ids)) == ["a", "b", "c", "d"] and ids == sorted(ids)
    assert [chunks[k] for k in range(len(ids)) if k == 0 or ids[k] != ids[k - 1]] == [0] * 4
    assert main(["embed", str(src), "-o", str(tmp_path / "v.npy"), "--quiet", *model]) == 0
    record = json.loads((tmp_path / "v.npy.poolkit.json").read_text())
    assert record["ids"] == ["a", "b", "c", "d"]
    assert record["provenance"]["rows"]["id_column"] == "_id"


def test_explicit_id_column_and_kept_fields(model, tmp_path, capfd):
    src = tmp_path / "in.jsonl"
    _jsonl(src, [{"id": k, "key": f"k{k}", "url": f"u/{k}", "n": k * 10, "text": t}
                 for k, t in enumerate(TEXTS)])  # fmt: skip
    out = tmp_path / "o.jsonl"
    assert main(["embed", str(src), "-o", str(out), "--id-column", "key",
                 "--keep-columns", "url,n", "--quiet", *model]) == 0  # fmt: skip
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["id"], r["url"], r["n"]) for r in rows] == [
        (f"k{k}", f"u/{k}", k * 10) for k in range(4)
    ]
    assert list(rows[0]) == ["id", "url", "n", "mean"]


@pytest.mark.parametrize(
    "ids, fragments",
    [
        (
            ["a", "b", "a", "c"],
            [
                "in.jsonl: line 3",
                "Expected a unique id in 'id', but got 'a'",
                "also the id of text 0",
            ],
        ),
        (["a", None, "b", "c"], ["in.jsonl: line 2", "Expected an id in 'id'"]),
        (["a", 2, "b", "c"], ["in.jsonl: line 2", "Expected a str id, as the ids before"]),
    ],
)
def test_bad_ids_are_refused_in_one_line_naming_the_row(model, tmp_path, capfd, ids, fragments):
    src = tmp_path / "in.jsonl"
    _jsonl(src, [{"id": i, "text": t} for i, t in zip(ids, TEXTS, strict=True)])
    out = tmp_path / "o.parquet"
    assert main(["embed", str(src), "-o", str(out), "--quiet", *model]) == 2
    err = _error(capfd)
    for fragment in fragments:
        assert fragment in err, err
    assert not out.exists()


def test_a_beir_folder_is_read_as_compare_reads_it(model, tiny_dirs, tmp_path, capfd):
    from poolkit.compare.retrieval import read_retrieval

    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    _jsonl(folder / "corpus.jsonl", [
        {"_id": "d1", "title": "Cats", "text": " Cats purr. "},
        {"_id": "d2", "title": "", "text": "Dogs bark."},
        {"_id": "d3", "text": "Birds sing."},
    ])  # fmt: skip
    _jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "which animal purrs"}])
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    out = tmp_path / "docs.parquet"
    assert main(["embed", str(folder), "-o", str(out), *model]) == 0
    assert 'title + " " + text' in capfd.readouterr().err
    table = pq.read_table(out)
    data = read_retrieval(folder)
    assert table.column("id").to_pylist() == data.doc_ids == ["d1", "d2", "d3"]
    expected = poolkit.embed(data.documents, str(tiny_dirs["bert_plain"]), recipe="mean")
    np.testing.assert_allclose(np.asarray(table.column("mean").to_pylist()), expected, atol=1e-6)
    record = json.loads(table.schema.metadata[b"poolkit"])["provenance"]
    assert "title" in record["input"]["documents"]


def test_the_record_beside_every_output_names_model_input_and_recipe(model, tiny_dirs, tmp_path):
    from poolkit.cli._provenance import model_sha256
    from poolkit.io.checkpoint import model_fingerprint

    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    model_hash = model_sha256(model_fingerprint(tiny_dirs["bert_plain"]))
    for name in ("o.npy", "o.jsonl", "o.parquet"):
        out = tmp_path / name
        argv = ["embed", str(src), "-o", str(out), "--quiet", *model]
        assert main(argv) == 0
        if name.endswith(".parquet"):
            record = json.loads(pq.read_schema(out).metadata[b"poolkit"])
        else:
            record = json.loads((tmp_path / f"{name}.poolkit.json").read_text())
        origin = record["provenance"]
        assert origin["model"]["path"] == str(tiny_dirs["bert_plain"])
        assert origin["model"]["sha256"] == model_hash
        assert origin["input"] == {"path": str(src), "sha256": digest, "text_column": None,
                                   "documents": None}  # fmt: skip
        assert origin["recipes"] == {"mean": "mean"}
        assert origin["command"] == "poolkit " + " ".join(argv).replace(str(out), "OUTPUT").replace(
            " --quiet", ""
        )
        assert origin["versions"]["poolkit"] == poolkit.__version__


def test_progress_lines_when_stderr_is_not_a_terminal(model, tmp_path, capfd, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(f"text number {k}" for k in range(3000)) + "\n", encoding="utf-8")
    monkeypatch.setenv("POOLKIT_PROGRESS_SECONDS", "0.01")
    assert main(["embed", str(src), "-o", str(tmp_path / "o.npy"), "--part-size", "500",
                 *model]) == 0  # fmt: skip
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("poolkit: embedding:")]
    assert lines and "of 3,000 texts" in lines[0] and "texts/s" in lines[0], lines
    assert main(["embed", str(src), "-o", str(tmp_path / "q.npy"), "--quiet", *model]) == 0
    assert capfd.readouterr().err == ""


def test_plain_progress_prints_every_interval_with_rate_and_time_left():
    now = [0.0]
    stream = io.StringIO()
    bar = PlainProgress("texts", total=1000, every=30, stream=stream, clock=lambda: now[0])
    now[0] = 10.0
    bar.update(100)  # before the interval: nothing
    assert stream.getvalue() == ""
    now[0] = 31.0
    bar.update(210)
    assert stream.getvalue() == (
        "poolkit: embedding: 310 of 1,000 texts (31%), 10.0 texts/s, about 69 s left\n"
    )


def test_a_beir_text_field_named_otherwise_is_read_alike(model, tiny_dirs, tmp_path, capfd):
    from poolkit.compare.retrieval import read_retrieval

    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    _jsonl(folder / "corpus.jsonl", [{"_id": "d1", "title": "Cats", "body": "They purr."},
                                     {"_id": "d2", "body": "Dogs bark."}])  # fmt: skip
    _jsonl(folder / "queries.jsonl", [{"_id": "q1", "body": "which animal purrs"}])
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    out = tmp_path / "docs.jsonl"
    argv = ["embed", str(folder), "-o", str(out), "--text-column", "body", "--quiet", *model]
    assert main(argv) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    data = read_retrieval(folder, text_column="body")
    assert data.documents == ["Cats They purr.", "Dogs bark."]
    assert [r["id"] for r in rows] == data.doc_ids
    expected = poolkit.embed(data.documents, str(tiny_dirs["bert_plain"]), recipe="mean")
    np.testing.assert_allclose(np.array([r["mean"] for r in rows]), expected, atol=1e-6)


def test_a_resumed_job_reads_the_same_ids(model, tmp_path, capfd):
    src, out = tmp_path / "in.jsonl", str(tmp_path / "o.parquet")
    rows = [{"id": f"r{k}", "key": k, "text": f"text {k}"} for k in range(5)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]) + "{broken\n")
    run = ["embed", str(src), "-o", out, "--part-size", "2", "--quiet", *model]
    assert main(run) == 2  # the bad line stops the job after two parts
    assert "2 finished parts are kept" in capfd.readouterr().err
    _jsonl(src, rows)  # fixed
    assert main([*run, "--resume", "--id-column", "key"]) == 2
    err = _error(capfd)  # other ids than the parts kept: refused
    assert "rows" in err and "key" in err, err
    assert main([*run, "--resume"]) == 0
    assert pq.read_table(out).column("id").to_pylist() == [f"r{k}" for k in range(5)]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "npz"])
def test_a_ragged_output_keeps_text_ids(tmp_path, fmt):
    """Multi-vector rows (one per token) carry their text's id: a user's ids as text."""
    from poolkit.io.writers import EmbeddingWriter

    out = tmp_path / f"o.{fmt}"
    vectors = np.arange(10, dtype=np.float32).reshape(5, 2)
    with EmbeddingWriter(out, fmt, ["mv"], False, kind="multivector") as w:
        w.write(["a", "a", "b", "c", "c"], {"mv": vectors})
    if fmt == "parquet":
        table = pq.read_table(out)
        assert table.column("id").to_pylist() == ["a", "b", "c"]
        assert [len(x) for x in table.column("mv").to_pylist()] == [2, 1, 2]
    elif fmt == "jsonl":
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert [(r["id"], len(r["mv"])) for r in rows] == [("a", 2), ("b", 1), ("c", 2)]
    else:
        with np.load(out) as z:
            assert z["ids"].tolist() == ["a", "b", "c"] and z["offsets"].tolist() == [0, 2, 3, 5]


def test_sparse_outputs_carry_the_inputs_ids(tmp_path, tmp_path_factory):
    from tiny_models import build_mlm

    mlm = str(build_mlm("bert_dense", tmp_path_factory.mktemp("mlm") / "bert"))
    src = tmp_path / "in.jsonl"
    _jsonl(src, [{"_id": f"d{k}", "text": t} for k, t in enumerate(TEXTS)])
    base = ["--recipe", "splade", "--model", mlm, "--quiet"]
    assert main(["embed", str(src), "-o", str(tmp_path / "s.parquet"), *base]) == 0
    assert pq.read_table(tmp_path / "s.parquet").column("id").to_pylist() == [
        "d0",
        "d1",
        "d2",
        "d3",
    ]
    assert main(["embed", str(src), "-o", str(tmp_path / "s.npz"), *base]) == 0
    record = json.loads((tmp_path / "s.npz.poolkit.json").read_text())
    assert record["ids"] == ["d0", "d1", "d2", "d3"]


@pytest.mark.parametrize("name", ["text_id", "input_id", "text"])
def test_ray_refuses_its_own_column_names_as_kept_fields_before_it_starts(
    model, tmp_path, capfd, name
):
    # The ids and kept fields on Ray, equal to these: test_ray.py.
    src = tmp_path / "in.jsonl"
    _jsonl(src, [{"id": f"d{k}", name: "u", "text": t} for k, t in enumerate(TEXTS)])
    out = tmp_path / "out"
    assert main(["embed", str(src), "-o", str(out), "--engine", "ray", "--keep-columns", name,
                 *model]) == 2  # fmt: skip
    error = _error(capfd)
    assert "--keep-columns" in error and repr(name) in error and "poolkit writes itself" in error
    assert not out.exists()
