"""read_stream (the parser behind read_texts, used by Ray for URIs) on open streams."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from poolkit.io.readers import InputError, pick_column, read_all, read_stream, read_texts

TEXTS = ["first, with a comma", 'a "quoted" one', "", "tab\tinside? no: plain", "last"]


def _files(tmp_path: Path) -> dict[str, Path]:
    texts = [t for t in TEXTS if "\t" not in t]  # a .txt/.tsv text cannot hold a tab
    out = {"txt": tmp_path / "a.txt", "jsonl": tmp_path / "a.jsonl", "csv": tmp_path / "a.csv"}
    out["txt"].write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    out["jsonl"].write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    quoted = ['"' + t.replace('"', '""') + '"' for t in TEXTS]
    out["csv"].write_text("id,text\n" + "".join(f"{k},{q}\n" for k, q in enumerate(quoted)))
    out["parquet"] = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": TEXTS}), out["parquet"], row_group_size=2)
    return out


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "parquet"])
def test_read_stream_matches_read_texts_chunk_by_chunk(tmp_path, fmt):
    path = _files(tmp_path)[fmt]
    with open(path, "rb") as f:
        chunks = list(read_stream(f, fmt, where=str(path), chunk_size=2))
    expected = read_all(path)
    assert [t for c in chunks for t in c] == expected
    assert all(len(c) == 2 for c in chunks[:-1]) and 1 <= len(chunks[-1]) <= 2
    assert expected == ([t for t in TEXTS if "\t" not in t] if fmt == "txt" else TEXTS)


def test_read_stream_empty_input_yields_nothing():
    assert list(read_stream(io.BytesIO(b""), "txt", where="empty.txt")) == []


def test_read_stream_errors_name_the_input_and_the_fix():
    with pytest.raises(TypeError, match=r"Expected `source` to be a binary stream for txt, but"):
        list(read_stream("a.txt", "txt", where="a.txt"))
    with pytest.raises(
        InputError, match=r"^s3://b/x\.jsonl: line 2: Expected valid JSON, but it is not"
    ):
        list(read_stream(io.BytesIO(b'"ok"\n{\n'), "json", where="s3://b/x.jsonl"))


def test_pick_column():
    assert pick_column(["id", "text"], None, "f") == "text"
    assert pick_column(["body"], None, "f") == "body"
    assert pick_column(["a", "b"], "b", "f") == "b"
    with pytest.raises(
        InputError, match=r"^f: Expected a 'text' column, but its columns are: a, b\. Cho"
    ):
        pick_column(["a", "b"], None, "f")
    with pytest.raises(
        InputError,
        match=r"^f: Expected `text_column` to be a column of the input, but got 'c'\. Its columns: a, b\.$",
    ):
        pick_column(["a", "b"], "c", "f")


def test_ray_uri_path_reads_like_read_texts(tmp_path):
    # Ray reads URIs (s3://, gs://, file://) through pyarrow streams and read_stream.
    from poolkit.ray._sources import iter_file_rows, list_inputs

    files = _files(tmp_path)
    (tmp_path / "a.tsv").write_text("n\ttext\n1\tx y\n2\t\n", encoding="utf-8")
    found = list_inputs(tmp_path.as_uri())
    assert [(f.name, f.fmt) for f in found] == [
        ("a.csv", "csv"),
        ("a.jsonl", "jsonl"),
        ("a.parquet", "parquet"),
        ("a.tsv", "tsv"),
        ("a.txt", "txt"),
    ]
    for f in found:
        assert f.path.startswith("file://")
        chunks = [part.texts for part in iter_file_rows(f, chunk_size=2)]
        local = files.get(f.fmt, tmp_path / "a.tsv")
        assert [t for c in chunks for t in c] == read_all(local), f.name
        assert all(len(c) == 2 for c in chunks[:-1])


@pytest.mark.parametrize(
    ("name", "data"),
    [("bom.csv", b"\xef\xbb\xbftext,label\n\"two\nlines\",1\nplain,0\n"),
     ("q.tsv", b"text\tlabel\n\"a\ttab\",x\ny\n".replace(b",x", b"\tx").replace(b"\ny\n", b"\nb\ty\n")),
     ("j.jsonl", b'\xef\xbb\xbf{"text": "caf\\u00e9", "label": "a"}\n\n{"text": "b", "label": "c"}\n'),
     ("nul.csv", b"text,label\nfine,1\nbad\x00,0\n"),
     ("ragged.csv", b"text,label\nok,1\ntoo,many,fields\n"),
     ("utf16.tsv", "text\tlabel\nx\ty\n".encode("utf-16")),
     ("open.csv", b'text,label\n"never closed,1\n')],
)  # fmt: skip
def test_embed_and_compare_read_a_table_the_same_way(tmp_path, name, data):
    """`poolkit embed` (read_texts) and `poolkit compare` (read_task) on one file: the same
    texts, or the same error line."""
    from poolkit.compare.datasets import Columns, read_task

    path = tmp_path / name
    path.write_bytes(data)
    try:
        texts = [t for chunk in read_texts(path, text_column="text") for t in chunk]
    except InputError as e:
        with pytest.raises(InputError) as info:
            read_task("classification", path, Columns())
        assert str(info.value) == str(e)
        return
    data_read = read_task("classification", path, Columns())
    assert data_read.texts == texts
    assert "\n" in texts[0] or "\t" in texts[0] or texts[0] == "café"


# STS-B's own lines: quotes are text, some open a field, some never close, one pair spans a
# tab (sentence1 opens a quote that sentence2 closes), some wrap a whole sentence.
STSB_QUOTES = [
    ["1.8", "\"Oh, you're such a good person!", "You're such a bad person!\""],
    ["0", '"Would you like to pay for others health care?"', '"Would you like to wear it?"'],
    ["3.0", '"They were tossed around like feathers," Gordon said.', "Plain."],
    ["2.5", 'A man plays a "flute".', '"Then the captain was gone.'],
    ["4.0", "Last one, no quote.", "Still none."],
]


@pytest.mark.parametrize("reader", ["records", "texts"])
def test_tsv_bare_quotes_are_text(tmp_path, reader):
    """The TSV convention: fields end at tabs and are not quoted, so a bare `"` (STS-B's
    files hold many) is part of the text, and embed and compare read the same rows."""
    from poolkit.io.readers import read_records

    path = tmp_path / "pairs.tsv"
    lines = ["score\tsentence1\tsentence2", *("\t".join(r) for r in STSB_QUOTES)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if reader == "texts":
        assert read_all(path, text_column="sentence2") == [r[2] for r in STSB_QUOTES]
        return
    names, records = read_records(path)
    assert names == ["score", "sentence1", "sentence2"]
    assert [w for w, _ in records] == [f"{path}:{n}" for n in range(2, 7)]
    assert [[r[k] for k in names] for _, r in records] == STSB_QUOTES


def test_tsv_bare_quotes_in_compare(tmp_path):
    from poolkit.compare.datasets import read_task

    path = tmp_path / "pairs.tsv"
    rows = ["score\tsentence1\tsentence2", *("\t".join(r) for r in STSB_QUOTES)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = read_task("sts", path)
    assert data.sentence1 == [r[1] for r in STSB_QUOTES]
    assert data.sentence2 == [r[2] for r in STSB_QUOTES]
    assert data.scores.tolist() == [float(r[0]) for r in STSB_QUOTES]


QUOTED_TEXTS = ['say "hi"', "a\ttab", "two\nlines", '"whole"', '"', "", "plain", '"Hi," he said']


@pytest.mark.parametrize("quoting", ["minimal", "all", "nonnumeric", "pandas"])
def test_tsv_written_by_csv_writers_reads_back(tmp_path, quoting):
    """Files that csv writers quote (pandas' to_csv(sep='\\t'), Python's csv) still read
    back as written: quoted fields with doubled quotes, tabs and line ends inside."""
    import csv

    path = tmp_path / "w.tsv"
    texts = [*QUOTED_TEXTS, *(r[1] for r in STSB_QUOTES)]
    if quoting == "pandas":
        import pandas as pd

        pd.DataFrame({"id": range(len(texts)), "text": texts}).to_csv(path, sep="\t", index=False)
    else:
        mode = {"minimal": csv.QUOTE_MINIMAL, "all": csv.QUOTE_ALL,
                "nonnumeric": csv.QUOTE_NONNUMERIC}[quoting]  # fmt: skip
        with path.open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=mode)
            writer.writerow(["id", "text"])
            writer.writerows(enumerate(texts))
    assert read_all(path, text_column="text") == texts
    with open(path, "rb") as f:  # the streaming parser (Ray's URIs) agrees
        assert [
            t for c in read_stream(f, "tsv", where="w.tsv", text_column="text") for t in c
        ] == texts


def test_tsv_problems_name_the_line(tmp_path):
    path = tmp_path / "r.tsv"
    path.write_text('text\tlabel\n"a" b\tx\nc\td\te\n', encoding="utf-8")
    with pytest.raises(
        InputError, match=r"r\.tsv: line 3: Expected at most the header's 2 fields, but got 3"
    ):
        read_all(path)
    path.write_text('text\tlabel\n"two\nlines"\tx\nok\t"unclosed\n', encoding="utf-8")
    assert read_all(path) == ["two\nlines", "ok"]


# --- one record loop per format: row ranges, headerless tables, one message per broken line

RANGE_TEXTS = [f"text {i}, with a comma" for i in range(25)]


def _range_files(tmp_path: Path) -> dict[str, Path]:
    out = {fmt: tmp_path / f"r.{fmt}" for fmt in ("txt", "jsonl", "csv", "tsv", "parquet")}
    out["txt"].write_text("".join(t + "\n" for t in RANGE_TEXTS), encoding="utf-8")
    out["jsonl"].write_text("".join(json.dumps({"text": t}) + "\n\n" for t in RANGE_TEXTS))
    out["csv"].write_text("n,text\n" + "".join(f'{k},"{t}"\n' for k, t in enumerate(RANGE_TEXTS)))
    out["tsv"].write_text("n\ttext\n" + "".join(f"{k}\t{t}\n" for k, t in enumerate(RANGE_TEXTS)))
    pq.write_table(pa.table({"n": range(25), "text": RANGE_TEXTS}), out["parquet"],
                   row_group_size=4)  # fmt: skip
    return out


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "tsv", "parquet"])
def test_read_stream_rows_reads_just_that_range(tmp_path, fmt):
    path = _range_files(tmp_path)[fmt]
    for start, stop in [(0, 25), (3, 18), (4, 8), (7, 9), (21, 30), (25, 25), (0, 1)]:
        with open(path, "rb") as f:
            source = path if fmt == "parquet" else f
            chunks = list(read_stream(source, fmt, where=str(path), chunk_size=3,
                                      rows=range(start, stop)))  # fmt: skip
        assert [t for c in chunks for t in c] == RANGE_TEXTS[start:stop], (start, stop)
        assert all(len(c) == 3 for c in chunks[:-1])


def test_a_parquet_range_reads_only_the_row_groups_that_hold_it(tmp_path):
    """Row group 2 (rows 20..24) is damaged: ranges before it read, a range or a whole read
    that reaches it fails naming the file, in one line."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"n": range(25), "text": RANGE_TEXTS}), path, row_group_size=10,
                   compression="none", use_dictionary=False)  # fmt: skip
    chunk = pq.ParquetFile(path).metadata.row_group(2).column(1)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset : chunk.data_page_offset + chunk.total_compressed_size] = (
        b"\xff" * chunk.total_compressed_size
    )
    path.write_bytes(bytes(data))

    def texts(rows=None):
        return [t for c in read_stream(str(path), "parquet", where=str(path), rows=rows) for t in c]

    assert texts(range(3, 20)) == RANGE_TEXTS[3:20]
    problem = (
        rf"^{re.escape(str(path))}: Expected a readable Parquet file, but it is not \([^\n]+\)\.$"
    )
    for call in (lambda: texts(range(15, 22)), texts, lambda: read_all(path)):
        with pytest.raises(InputError, match=problem):
            call()
    from poolkit.io.readers import read_records

    with pytest.raises(InputError, match=problem):
        read_records(path)


def test_read_records_names_reads_a_table_without_a_header_row(tmp_path):
    from poolkit.io.readers import read_records

    path = tmp_path / "q.tsv"
    path.write_text('1\ta\t2\n\n"say ""hi"""\tb\t1\n3\tc\n', encoding="utf-8")
    names, records = read_records(path, names=["q", "d", "s"])
    assert names == ["q", "d", "s"]
    assert records == [
        (f"{path}:1", {"q": "1", "d": "a", "s": "2"}),  # the first row is a record
        (f"{path}:3", {"q": 'say "hi"', "d": "b", "s": "1"}),  # quoted as csv writes TSV
        (f"{path}:4", {"q": "3", "d": "c"}),  # short of a field
    ]
    csv_path = tmp_path / "q.csv"
    csv_path.write_text("1,a,2\n3,c,0,9\n", encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(
        f"{csv_path}: line 2: Expected at most 3 (q, d, s) fields, but got 4. Quote fields that "
        "contain ','."
    )):  # fmt: skip
        read_records(csv_path, names=["q", "d", "s"])


BROKEN = {
    "jsonl": ('{"text": "a"}\n\n{"text": "b"}\n{"text": \n{"text": "c"}\n', 4, "Expected valid JSON, but it is not"),
    "csv": ('text,label\na,1\n"b\nc",2\nd,3,4\n', 5, "Expected at most the header's 2 fields, but got 3"),
    "tsv": ("text\tlabel\na\t1\nb\t2\t3\n", 3, "Expected at most the header's 2 fields, but got 3"),
}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(BROKEN))
def test_every_reader_names_a_broken_line_in_one_message(tmp_path, fmt):
    """read_records, read_texts, read_rows and read_stream take records from one loop per
    format, so one broken line gives one message naming the file and the line."""
    from poolkit.io.readers import read_records, read_rows

    content, line, problem = BROKEN[fmt]
    path = tmp_path / f"b.{fmt}"
    path.write_text(content, encoding="utf-8")
    expected = rf"^{re.escape(str(path))}: line {line}: {problem}"

    def stream():
        with open(path, "rb") as f:
            return list(read_stream(f, fmt, where=str(path), text_column="text"))

    calls = [lambda: read_records(path), lambda: read_all(path, text_column="text"),
             lambda: list(read_rows(path, text_column="text", column="text")), stream]  # fmt: skip
    messages = set()
    for call in calls:
        with pytest.raises(InputError, match=expected) as info:
            call()
        messages.add(str(info.value))
    assert len(messages) == 1, messages
