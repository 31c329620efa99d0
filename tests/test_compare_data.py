"""Task readers of `poolkit compare`: the native formats, generic tables, and every error."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testdata import conll_sentences, fixture, full_data

from poolkit import InputError
from poolkit.compare.datasets import Columns, DataError, read_task, strip_markers


def test_stsb_native_keeps_first_seven_fields_and_literal_quotes(tmp_path):
    # The committed sample, plus a line carrying the 2 extra source fields and literal
    # quotes, as some lines of the full file do.
    extra = 'main-news\theadlines\t2016\t0281\t5\t"Quoted" words\tA b\tsource\tnote\n'
    path = tmp_path / "sts.csv"
    path.write_text(fixture("stsb-dev-sample.csv").read_text(encoding="utf-8") + extra, "utf-8")
    data = read_task("sts", path)
    # Independent read: split on tabs by hand.
    fields = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(data) == len(fields) == 168
    assert data.sentence1 == [f[5] for f in fields]
    assert data.sentence2 == [f[6] for f in fields]
    np.testing.assert_array_equal(data.scores, [float(f[4]) for f in fields])
    assert data.sentence1[-1] == '"Quoted" words'


@pytest.mark.data
def test_stsb_full_dev_file():
    path = full_data("stsb/sts-dev.csv")
    data = read_task("sts", path)
    fields = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(data) == 1500
    assert data.sentence2 == [f[6] for f in fields]


def test_sst2_native():
    data = read_task("classification", fixture("sentiment.txt"))
    lines = fixture("sentiment.txt").read_text(encoding="utf-8").splitlines()
    assert len(data) == 120 and set(data.labels) == {"0", "1"}
    assert data.texts == [line.split(" ", 1)[1] for line in lines]
    assert data.labels == [line.split(" ", 1)[0] for line in lines]


@pytest.mark.data
def test_sst2_full_dev_file():
    data = read_task("classification", full_data("sst2/stsa.binary.dev"))
    assert len(data) == 872 and set(data.labels) == {"0", "1"}
    assert data.texts[0] == "one long string of cliches ."


def test_conll_sentences_and_tags():
    path = fixture("wnut17-train-sample.conll")  # sentences end at a line holding one tab
    data = read_task("ner", path)
    expected = conll_sentences(path)
    assert len(data) == len(expected) == 100
    assert data.words == [[w for w, _ in s] for s in expected]
    assert data.tags == [[t for _, t in s] for s in expected]


@pytest.mark.data
def test_conll_full_dev_file():
    data = read_task("ner", full_data("wnut17/emerging.dev.conll"))
    assert len(data) == 1009
    assert sum(map(len, data.words)) == 15733
    assert data.words[0][:3] == ["Stabilized", "approach", "or"]
    assert all(len(w) == len(t) for w, t in zip(data.words, data.tags, strict=True))


def test_semeval_markers_stripped_and_spans_recorded():
    data = read_task("relation", fixture("relations-dev.txt"))
    assert len(data) == 50
    assert data.texts[0] == "A sudden heat led to the fatigue that followed."
    assert [data.texts[0][s:e] for s, e in data.spans[0]] == ["heat", "fatigue"]
    assert data.labels[0] == "Cause-Effect(e1,e2)"
    assert not any("<e1>" in t or "</e2>" in t for t in data.texts)


@pytest.mark.data
def test_semeval_full_train_file():
    data = read_task("relation", full_data("semeval2010_task8/TRAIN_FILE.TXT"))
    assert len(data) == 8000
    assert data.texts[0] == (
        "The system as described above has its greatest application in an arrayed "
        "configuration of antenna elements."
    )
    assert [data.texts[0][s:e] for s, e in data.spans[0]] == ["configuration", "elements"]
    assert data.labels[0] == "Component-Whole(e2,e1)"


def test_strip_markers_e2_before_e1():
    text, spans = strip_markers("a <e2>b c</e2> d <e1>e</e1>")
    assert text == "a b c d e"
    assert [text[s:e] for s, e in spans] == ["e", "b c"]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv", ".parquet"])
def test_tables_with_configured_columns(tmp_path, suffix):
    rows = [
        {"a": "first text", "b": "x", "s": json.dumps([[0, 5], [6, 10]])},
        {"a": "second one", "b": "y", "s": json.dumps([[0, 6], [7, 10]])},
    ]
    path = tmp_path / f"t{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps({**r, "s": json.loads(r["s"])}) for r in rows))
    elif suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist([{**r, "s": json.loads(r["s"])} for r in rows]), path)
    else:
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, ["a", "b", "s"], delimiter="," if suffix == ".csv" else "\t")
            w.writeheader()
            w.writerows(rows)
    cols = Columns(text="a", label="b", spans="s")
    texts = read_task("classification", path, cols)
    assert texts.texts == ["first text", "second one"] and texts.labels == ["x", "y"]
    spans = read_task("relation", path, cols)
    assert [[t[s:e] for s, e in p] for t, p in zip(spans.texts, spans.spans, strict=True)] == [
        ["first", "text"],
        ["second", "one"],
    ]


def test_sts_table(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"sentence1": "a b", "sentence2": "c", "score": 3}\n')
    data = read_task("sts", path)
    assert data.sentence1 == ["a b"] and data.scores.tolist() == [3.0]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("task", "name", "text", "message"),
    [
        ("sts", "p.jsonl", '{"sentence1": "a", "score": 1}\n', r"p.jsonl: Expected `sentence2_column` to be a column of the file, but got 'sentence2'. Its columns: sentence1, score\."),
        ("sts", "p.jsonl", '{"sentence1": "a", "sentence2": "b", "score": "high"}\n', r"p.jsonl:1: Expected a numeric 'score', but got 'high'"),
        ("sts", "p.txt", "just some text\n", r"p.txt: Expected an STS-B tsv file, or a .jsonl/.csv/.tsv/.parquet table"),
        ("sts", "p.tsv", "g\tf\ty\ti\t1.0\tonly one sentence\n", r"Expected `sentence1_column` to be a column of the file, but got 'sentence1'"),
        ("sts", "p.jsonl", '{"sentence1": "a",\n', r"p.jsonl: line 1: Expected valid JSON, but it is not"),
        ("classification", "c.txt", "1 good\nnolabel\n", r"c.txt:2: Expected `LABEL sentence` \(SST-2 format\)"),
        ("classification", "c.csv", "text,label\nhello,\n", r"c.csv:2: Expected a value in 'label', but it is empty"),
        ("classification", "c.csv", "words,label\nhello,1\n", r"Expected `text_column` to be a column of the file, but got 'text'. Its columns: words, label\."),
        ("ner", "n.conll", "John\tB-PER\nworks\n", r"n.conll:2: Expected `token<TAB>tag` \(CoNLL\)"),
        ("ner", "n.conll", "John\tPERSON\n", r"n.conll:1: Expected a BIO/IOB tag \(O, B-TYPE, I-TYPE\), but got 'PERSON'"),
        ("ner", "n.conll", "\n\n", r"n.conll: Expected CoNLL `token<TAB>tag` lines, but no sentence was found"),
        ("relation", "r.txt", '1\t"no markers here"\nOther\n', r"r.txt:1: Expected one non-empty <e1>..</e1> entity"),
        ("relation", "r.txt", "1\tnot quoted\n", r"r.txt:1: Expected `ID<TAB>\"sentence with <e1>"),
        ("relation", "r.txt", '1\t"<e1>a</e1> <e2>b</e2>"\n', r"r.txt:1: Expected a relation label line after the sentence"),
        ("relation", "r.jsonl", '{"text": "abc", "spans": [[0, 1], [2, 9]], "label": "x"}\n', r"r.jsonl:1: Expected span 2 \[2, 9\) inside the text of length 3, but it is outside"),
        ("relation", "r.jsonl", '{"text": "abc", "spans": [[0, 1]], "label": "x"}\n', r"r.jsonl:1: Expected 'spans' to be two \[start, end\] character offsets"),
        ("relation", "r.jsonl", '{"text": "a c", "spans": [[0, 1], [1, 2]], "label": "x"}\n', r"r.jsonl:1: Expected span 2 \[1, 2\) to cover text, but it covers only whitespace"),
    ],
)  # fmt: skip
def test_errors_name_the_row(tmp_path, task, name, text, message):
    # InputError: the reader's own (shared with `poolkit embed`) or a DataError (compare's).
    with pytest.raises(InputError, match=message):
        read_task(task, _write(tmp_path, name, text))


def test_missing_file_and_bad_encoding(tmp_path):
    with pytest.raises(
        DataError, match=r"nope.csv: Expected a data file, but there is no such file"
    ):
        read_task("sts", tmp_path / "nope.csv")
    path = tmp_path / "bad.txt"
    path.write_bytes(b"1 caf\xe9\n")
    with pytest.raises(
        InputError, match=r"bad.txt: line 1: Expected UTF-8 text, but it is not valid UTF-8"
    ):
        read_task("classification", path)
