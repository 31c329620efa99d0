"""Ray's corpus pieces are read by poolkit's readers (``read_stream(rows=)``): each piece
holds exactly its rows, in every format, local or by URI, and a broken line is named by
file and line, by the piece that reaches it and by ``poolkit embed --engine ray``.

The reference texts are the lists written here; no Ray is needed except by the CLI test,
which runs the command as its own process (it starts a Ray instance of its own).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import clitools
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from poolkit.io.readers import InputError
from poolkit.ray._sources import (
    Corpus,
    InputFile,
    _piece_rows,
    _read_pieces,
    _scan_file,
    list_inputs,
)

TEXTS = [f"row {i}, a text" for i in range(23)]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    (folder / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n\n" for t in TEXTS))
    (folder / "c.csv").write_text("n,text\n" + "".join(f'{k},"{t}"\n' for k, t in enumerate(TEXTS)))
    (folder / "d.tsv").write_text("n\ttext\n" + "".join(f"{k}\t{t}\n" for k, t in enumerate(TEXTS)))
    pq.write_table(pa.table({"n": range(23), "text": TEXTS}), folder / "e.parquet",
                   row_group_size=4)  # fmt: skip
    return folder


@pytest.mark.parametrize("uri", [False, True])
def test_every_piece_holds_exactly_its_rows(tmp_path, uri):
    folder = _folder(tmp_path)
    files = list_inputs(folder.as_uri() if uri else folder)
    corpus = Corpus(files, [_scan_file(f, None)[0] for f in files])
    assert corpus.counts == [len(TEXTS)] * 5
    pieces = corpus.pieces(5)  # Parquet pieces cross its row groups of 4 rows
    assert len(pieces) == 25
    table = _read_pieces({k: np.array([p[k] for p in pieces]) for k in pieces[0]},
                         text_column=None)  # fmt: skip
    names = ["a.txt", "b.jsonl", "c.csv", "d.tsv", "e.parquet"]
    assert table["id"].to_pylist() == list(range(5 * len(TEXTS)))
    assert table["text_id"].to_pylist() == [f"{n}:{r}" for n in names for r in range(len(TEXTS))]
    assert table["text"].to_pylist() == TEXTS * 5


def test_a_piece_names_the_broken_line_it_reaches(tmp_path):
    path = tmp_path / "b.jsonl"
    lines = [json.dumps({"text": t}) for t in TEXTS[:10]]
    lines[7] = '{"text": '
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    file = InputFile(str(path), "b.jsonl", "jsonl")
    assert _piece_rows(file, 2, 6, None).texts == TEXTS[2:6]  # parsed up to its stop only
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(path))}: line 8: Expected valid JSON, but it is not"
    ):
        _piece_rows(file, 6, 10, None)
    with pytest.raises(
        InputError, match=r"^file://.*/b\.jsonl: line 8: Expected valid JSON, but it is not"
    ):
        _piece_rows(InputFile(path.as_uri(), "b.jsonl", "jsonl"), 6, 10, None)

    parquet = tmp_path / "e.parquet"
    values = [*TEXTS[:9], None, *TEXTS[10:]]
    pq.write_table(pa.table({"text": values}), parquet, row_group_size=4)
    file = InputFile(str(parquet), "e.parquet", "parquet")
    assert _piece_rows(file, 1, 9, None).texts == TEXTS[1:9]
    assert _piece_rows(file, 12, 23, None).texts == TEXTS[12:23]
    with pytest.raises(
        InputError, match=r"e\.parquet: row 9: Expected a string in column 'text', but got null"
    ):
        _piece_rows(file, 8, 12, None)


@pytest.mark.slow
def test_ray_cli_names_the_broken_line(tmp_path, minilm_dir):
    pytest.importorskip("ray")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    (folder / "b.jsonl").write_text('{"text": "a"}\n\n{"text": \n', encoding="utf-8")
    out = tmp_path / "out"
    run = subprocess.run(
        clitools.command("embed", str(folder), "-o", str(out), "--engine", "ray",
                         "--model", str(minilm_dir)),
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]  # Ray logs its start above it
    assert (
        last
        == f"poolkit: error: {folder / 'b.jsonl'}: line 3: Expected valid JSON, but it is not (Expecting value)."
    )
    assert "Traceback" not in run.stderr and not out.exists()


@pytest.mark.parametrize("uri", [False, True])
def test_pieces_carry_each_rows_own_id_and_kept_fields(tmp_path, uri):
    """`input_id` and the kept fields of every piece are the values `read_rows` (the local
    engine's reader) gives the same rows, whatever the format and wherever pieces cut."""
    from poolkit.io.readers import read_rows

    folder = tmp_path / "in"
    folder.mkdir()
    rows = [{"_id": f"d{k}", "url": f"u/{k}", "n": k, "text": t} for k, t in enumerate(TEXTS)]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n\n" for r in rows))
    (folder / "b.csv").write_text(
        "_id,url,n,text\n"
        + "".join(f'{r["_id"]},{r["url"]},{r["n"]},"{r["text"]}"\n' for r in rows)
    )
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), folder / "c.parquet",
                   row_group_size=4)  # fmt: skip
    files = list_inputs(folder.as_uri() if uri else folder)
    keep = ("url", "n")
    scanned = [_scan_file(f, None, "auto", keep) for f in files]
    corpus = Corpus(files, [n for n, _ in scanned], None, tuple(i for _, i in scanned), keep)
    assert corpus.id_type == "str" and [i.column for _, i in scanned] == ["_id"] * 3
    got: dict[str, list] = {"input_id": [], "url": [], "n": []}
    for piece in corpus.pieces(5):  # one piece a call, as Ray reads them (batch_size=1)
        table = _read_pieces({k: np.array([v]) for k, v in piece.items()}, text_column=None,
                             id_type=corpus.id_type, keep_columns=keep)  # fmt: skip
        for k in got:
            got[k] += table[k].to_pylist()
    want: dict[str, list] = {"input_id": [], "url": [], "n": []}
    for name in ("a.jsonl", "b.csv", "c.parquet"):
        for part in read_rows(folder / name, id_column="auto", keep_columns=keep):
            want["input_id"] += part.ids
            for k in keep:
                want[k] += part.kept[k]
    assert got["input_id"] == want["input_id"] == [r["_id"] for r in rows] * 3
    assert got["url"] == want["url"]
    # Integers stay integers where the file holds them (JSON, Parquet); CSV fields are text.
    assert got["n"] == want["n"] and {type(v) for v in got["n"]} == {int, str}
    # Where each row was read: the file's own line (blank lines count) or Parquet row.
    jsonl = scanned[0][1]
    assert jsonl.where[3] == f"{files[0].path}: line 7"
    assert scanned[2][1].where[0] == f"{files[2].path}: row 1"
