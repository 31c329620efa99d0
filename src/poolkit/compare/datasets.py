"""Task files for `poolkit compare` (:func:`read_task`): read, validate, and hold them in
memory as :class:`PairData` (``sts``), :class:`TextData` (``classification``),
:class:`TaggedData` (``ner``) or :class:`SpanPairData` (``relation``). Every problem
raises :class:`DataError` with one line naming the file and the row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from poolkit.errors import InputError
from poolkit.io.readers import numbered_lines, read_records

__all__ = [
    "TASKS",
    "Columns",
    "DataError",
    "PairData",
    "SpanPairData",
    "TaggedData",
    "TextData",
    "read_task",
]

TASKS = ("sts", "classification", "ner", "relation")
TABLE_SUFFIXES = (".jsonl", ".csv", ".tsv", ".parquet")


class DataError(InputError):
    """A task file that cannot be used as given; the message names the file and row."""


@dataclass(frozen=True)
class Columns:
    """Column names for generic tables (``.jsonl``, ``.csv``, ``.tsv``, ``.parquet``)."""

    text: str = "text"
    label: str = "label"
    sentence1: str = "sentence1"
    sentence2: str = "sentence2"
    score: str = "score"
    spans: str = "spans"


@dataclass(frozen=True)
class PairData:
    """Sentence pairs for ``sts``: ``scores`` is float64 ``(N,)``."""

    sentence1: list[str]
    sentence2: list[str]
    scores: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.sentence1)


@dataclass(frozen=True)
class TextData:
    """Labelled texts for ``classification``; ``rows[i]`` names example i in messages."""

    texts: list[str]
    labels: list[str]
    source: str = ""
    rows: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class TaggedData:
    """Pre-split sentences for ``ner``: ``words[i][j]`` has tag ``tags[i][j]``."""

    words: list[list[str]]
    tags: list[list[str]]
    source: str = ""

    def __len__(self) -> int:
        return len(self.words)


@dataclass(frozen=True)
class SpanPairData:
    """Texts with two entity spans for ``relation``.

    ``spans`` is int64 ``(N, 2, 2)``: ``spans[i, k] = [start, end)`` character offsets of
    entity ``k`` in ``texts[i]``, half-open like Python slices.
    """

    texts: list[str]
    spans: np.ndarray
    labels: list[str]
    source: str = ""
    rows: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


TaskData = PairData | TextData | TaggedData | SpanPairData


def read_task(task: str, path: str | Path, columns: Columns | None = None) -> TaskData:
    """Read ``path`` as a data file of ``task`` (one of :data:`TASKS`).

    Tables (``.jsonl``, ``.csv``, ``.tsv``, ``.parquet``) use ``columns``; native formats
    are recognised: STS-B tsv (any suffix, tab-separated, score in field 5, sentences in
    fields 6-7), SST-2 ``LABEL sentence`` lines (classification, any other suffix), CoNLL
    (ner, always), SemEval-2010 Task 8 (relation, any suffix but ``.jsonl``/tables).
    Raises :class:`DataError` naming the file and row on any problem.
    """
    if task not in TASKS:
        raise DataError(arg="task", expected=f"one of {', '.join(TASKS)}", got=repr(task))
    columns = columns or Columns()
    path = Path(path)
    if not path.is_file():
        raise DataError(where=path, expected="a data file", got="there is no such file")
    suffix = path.suffix.lower()
    if task == "ner":
        return _read_conll(path)
    if task == "sts":
        if suffix in (".jsonl", ".parquet") or not _looks_like_stsb(path):
            return _pairs_from_table(path, columns)
        return _read_stsb(path)
    if task == "classification":
        if suffix in TABLE_SUFFIXES:
            return _texts_from_table(path, columns)
        return _read_sst2(path)
    if suffix in TABLE_SUFFIXES:
        return _spans_from_table(path, columns)
    return _read_semeval(path)


# ---------------------------------------------------------------------------- text files


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its end), decoded as ``poolkit embed`` decodes
    (:func:`poolkit.io.readers.numbered_lines`: UTF-8 only, BOM dropped, NUL refused)."""
    with path.open("rb") as f:
        yield from numbered_lines(f, str(path))


def _looks_like_stsb(path: Path) -> bool:
    for _, line in _lines(path):
        if line.strip():
            fields = line.split("\t")
            return len(fields) >= 7 and _is_float(fields[4])
    return False


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_stsb(path: Path) -> PairData:
    # Quotes are literal text in STS-B, and some lines carry two extra source fields.
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for number, line in _lines(path):
        fields = line.split("\t")
        where = f"{path}:{number}"
        if not "".join(fields).strip():
            continue
        if len(fields) < 7:
            raise DataError(where=where, expected="7 tab-separated STS-B fields (genre, file, year, "
                            "id, score, sentence1, sentence2)", got=f"got {len(fields)}")  # fmt: skip
        if not _is_float(fields[4]):
            raise DataError(where=where, expected="a numeric score in field 5",
                            got=f"got {fields[4]!r}")  # fmt: skip
        s1.append(_nonempty(fields[5], where, "sentence1"))
        s2.append(_nonempty(fields[6], where, "sentence2"))
        scores.append(float(fields[4]))
    return _finish_pairs(path, s1, s2, scores)


def _read_sst2(path: Path) -> TextData:
    texts: list[str] = []
    labels: list[str] = []
    rows: list[str] = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        label, _, text = line.strip().partition(" ")
        where = f"{path}:{number}"
        if not text.strip():
            raise DataError(where=where, expected="`LABEL sentence` (SST-2 format) or a table with "
                            "columns", got=f"got {line[:60]!r}",
                            fix="Use a .jsonl/.csv/.tsv/.parquet file for tables.")  # fmt: skip
        texts.append(text.strip())
        labels.append(label)
        rows.append(where)
    return _finish_texts(path, texts, labels, rows)


def _read_conll(path: Path) -> TaggedData:
    words: list[list[str]] = []
    tags: list[list[str]] = []
    cur_w: list[str] = []
    cur_t: list[str] = []
    for number, line in _lines(path):
        if not line.strip() or line.startswith("-DOCSTART-"):
            if cur_w:
                words.append(cur_w)
                tags.append(cur_t)
                cur_w, cur_t = [], []
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        where = f"{path}:{number}"
        if len(fields) < 2 or not fields[0]:
            raise DataError(
                where=where, expected="`token<TAB>tag` (CoNLL)", got=f"got {line[:60]!r}"
            )
        tag = fields[-1].strip()
        _check_tag(tag, where)
        cur_w.append(fields[0])
        cur_t.append(tag)
    if cur_w:
        words.append(cur_w)
        tags.append(cur_t)
    if not words:
        raise DataError(
            where=path, expected="CoNLL `token<TAB>tag` lines", got="no sentence was found"
        )
    return TaggedData(words, tags, str(path))


_TAG = re.compile(r"^(O|[BI]-\S+)$")


def _check_tag(tag: str, where: str) -> None:
    if not _TAG.match(tag):
        raise DataError(
            where=where, expected="a BIO/IOB tag (O, B-TYPE, I-TYPE)", got=f"got {tag!r}"
        )


_SEMEVAL = re.compile(r'^\s*\S+\t"(.*)"\s*$')
_MARKER = re.compile(r"</?e[12]>")


def _read_semeval(path: Path) -> SpanPairData:
    texts: list[str] = []
    spans: list[list[list[int]]] = []
    labels: list[str] = []
    rows: list[str] = []
    pending: tuple[str, list[list[int]], str] | None = None
    for number, line in _lines(path):
        where = f"{path}:{number}"
        if pending is not None:
            label = line.strip()
            if not label:
                raise DataError(where=where, expected=f"the relation label after line {number - 1}",
                                got="the line is empty")  # fmt: skip
            texts.append(pending[0])
            spans.append(pending[1])
            labels.append(label)
            rows.append(pending[2])
            pending = None
            continue
        if not line.strip() or line.startswith("Comment:"):
            continue
        match = _SEMEVAL.match(line)
        if not match:
            raise DataError(where=where, expected='`ID<TAB>"sentence with <e1>..</e1> and '
                            '<e2>..</e2>"` (SemEval-2010 Task 8) or a .jsonl file',
                            got=f"got {line[:60]!r}")  # fmt: skip
        text, pair = strip_markers(match.group(1), where)
        pending = (text, pair, where)
    if pending is not None:
        raise DataError(where=pending[2], expected="a relation label line after the sentence",
                        got="the file ends")  # fmt: skip
    return _finish_spans(path, texts, spans, labels, rows)


def strip_markers(marked: str, where: str = "text") -> tuple[str, list[list[int]]]:
    """Remove ``<e1>..</e1>`` and ``<e2>..</e2>`` from ``marked``.

    Returns the plain text and ``[[s1, e1], [s2, e2]]``: half-open character spans of the
    two entities in the plain text. Raises :class:`DataError` naming ``where`` unless each
    marker occurs exactly once, opening before closing, around a non-empty entity.
    """
    found: dict[str, int] = {}
    pieces: list[str] = []
    pos = 0
    length = 0
    for m in _MARKER.finditer(marked):
        pieces.append(marked[pos : m.start()])
        length += m.start() - pos
        pos = m.end()
        if m.group() in found:
            raise DataError(where=where, expected=f"marker {m.group()} once", got="it occurs twice")
        found[m.group()] = length
    pieces.append(marked[pos:])
    out: list[list[int]] = []
    for k in ("1", "2"):
        start, end = found.get(f"<e{k}>"), found.get(f"</e{k}>")
        if start is None or end is None or end <= start:
            raise DataError(where=where, expected=f"one non-empty <e{k}>..</e{k}> entity in the "
                            "sentence", got="it is missing or empty")  # fmt: skip
        out.append([start, end])
    return "".join(pieces), out


# ---------------------------------------------------------------------------- tables


def _require(path: Path, names: list[str], wanted: dict[str, str]) -> None:
    for option, name in wanted.items():
        if name not in names:
            have = ", ".join(names) if names else "none"
            raise DataError(where=path, arg=f"{option}_column", expected="a column of the file",
                            got=repr(name), fix=f"Its columns: {have}.")  # fmt: skip


def _field(rec: dict, name: str, where: str) -> object:
    value = rec.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(where=where, expected=f"a value in {name!r}", got="it is empty")
    return value


def _nonempty(text: object, where: str, name: str) -> str:
    if not isinstance(text, str):
        raise DataError(where=where, expected=f"text in {name!r}", got=f"got {type(text).__name__}")
    if not text.strip():
        raise DataError(where=where, expected=f"a value in {name!r}", got="it is empty")
    return text


def _pairs_from_table(path: Path, c: Columns) -> PairData:
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise DataError(where=path, expected="an STS-B tsv file, or a .jsonl/.csv/.tsv/.parquet "
                        f"table with columns {c.sentence1}, {c.sentence2}, {c.score}",
                        got="it is neither")  # fmt: skip
    names, records = read_records(path)
    _require(path, names, {"sentence1": c.sentence1, "sentence2": c.sentence2, "score": c.score})
    s1, s2, scores = [], [], []
    for where, rec in records:
        s1.append(_nonempty(_field(rec, c.sentence1, where), where, c.sentence1))
        s2.append(_nonempty(_field(rec, c.sentence2, where), where, c.sentence2))
        score = _field(rec, c.score, where)
        if isinstance(score, bool) or not _is_float(str(score)):
            raise DataError(where=where, expected=f"a numeric {c.score!r}", got=f"got {score!r}")
        scores.append(float(score))
    return _finish_pairs(path, s1, s2, scores)


def _texts_from_table(path: Path, c: Columns) -> TextData:
    names, records = read_records(path)
    _require(path, names, {"text": c.text, "label": c.label})
    texts, labels, rows = [], [], []
    for where, rec in records:
        texts.append(_nonempty(_field(rec, c.text, where), where, c.text))
        labels.append(str(_field(rec, c.label, where)))
        rows.append(where)
    return _finish_texts(path, texts, labels, rows)


def _spans_from_table(path: Path, c: Columns) -> SpanPairData:
    names, records = read_records(path)
    _require(path, names, {"text": c.text, "spans": c.spans, "label": c.label})
    texts, spans, labels, rows = [], [], [], []
    for where, rec in records:
        texts.append(_nonempty(_field(rec, c.text, where), where, c.text))
        raw = _field(rec, c.spans, where)
        if isinstance(raw, str):  # csv/tsv cells hold the spans as JSON
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError:
                raise DataError(where=where, expected=f"JSON in {c.spans!r}",
                                got=f"got {raw!r}") from None  # fmt: skip
        spans.append(_span_pair(raw, c.spans, where))
        labels.append(str(_field(rec, c.label, where)))
        rows.append(where)
    return _finish_spans(path, texts, spans, labels, rows)


def _span_pair(raw: object, name: str, where: str) -> list[list[int]]:
    ok = (
        isinstance(raw, list | tuple)
        and len(raw) == 2
        and all(
            isinstance(s, list | tuple)
            and len(s) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in s)
            for s in raw
        )
    )
    if not ok:
        raise DataError(where=where, expected=f"{name!r} to be two [start, end] character "
                        "offsets, like [[0, 4], [15, 21]]", got=f"got {raw!r}")  # fmt: skip
    return [list(s) for s in raw]  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- checks


def _finish_pairs(path: Path, s1: list[str], s2: list[str], scores: list[float]) -> PairData:
    if not s1:
        raise DataError(where=path, expected="sentence pairs", got="none was found")
    return PairData(s1, s2, np.asarray(scores, dtype=np.float64), str(path))


def _finish_texts(path: Path, texts: list[str], labels: list[str], rows: list[str]) -> TextData:
    if not texts:
        raise DataError(where=path, expected="examples", got="none was found")
    return TextData(texts, labels, str(path), rows)


def _finish_spans(
    path: Path,
    texts: list[str],
    spans: list[list[list[int]]],
    labels: list[str],
    rows: list[str],
) -> SpanPairData:
    if not texts:
        raise DataError(where=path, expected="examples", got="none was found")
    for text, pair, where in zip(texts, spans, rows, strict=True):
        for k, (start, end) in enumerate(pair, 1):
            if not 0 <= start < end <= len(text):
                raise DataError(where=where, expected=f"span {k} [{start}, {end}) inside the text "
                                f"of length {len(text)}", got="it is outside",
                                fix="Spans are half-open character offsets [start, end).")  # fmt: skip
            if not text[start:end].strip():
                raise DataError(where=where, expected=f"span {k} [{start}, {end}) to cover text",
                                got="it covers only whitespace")  # fmt: skip
    return SpanPairData(texts, np.asarray(spans, dtype=np.int64), labels, str(path), rows)
