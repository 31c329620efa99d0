"""Texts from files, in chunks: ``.txt``, ``.jsonl``, ``.csv``, ``.tsv``, ``.parquet``, stdin.

:func:`read_texts` yields ``list[str]`` chunks in file order; :func:`read_rows` yields
:class:`Rows`: the same texts with the value of one more field beside each (``poolkit
embed --chunks column:NAME`` reads chunk spans so) and where each was read. Problems raise
:class:`InputError` with the file, the line (or row) number and the fix.

- ``.txt``: one text per line (line ends stripped; empty lines are empty texts).
- ``.jsonl``: one JSON object per line, text in ``text_column`` (default ``"text"``);
  a line may also be a bare JSON string. Blank lines are skipped.
- ``.csv`` / ``.tsv``: a header row, then records; text in ``text_column`` (default
  ``"text"``, or the only column). In ``.tsv`` quotes are text (fields end at tabs), except
  in a field quoted as csv and pandas write TSV (``"a ""b"" c"``, which may hold tabs).
- ``.parquet``: a string column ``text_column`` (default ``"text"``, or the only column).
- ``-``: standard input, read as ``fmt`` (default ``txt``).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from poolkit._errors import type_error, value_error
from poolkit.errors import InputError  # the family's; raised here for unreadable input

__all__ = [
    "INPUT_FORMATS",
    "InputError",
    "Rows",
    "input_format",
    "kept_column",
    "pick_column",
    "read_all",
    "read_records",
    "read_rows",
    "read_stream",
    "read_texts",
]

INPUT_FORMATS = ("txt", "jsonl", "csv", "tsv", "parquet")
_ALIASES = {"text": "txt", "json": "jsonl", "ndjson": "jsonl", "pq": "parquet"}


def input_format(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The input format: ``fmt`` if given, else from the extension (stdin: ``txt``)."""
    if fmt is not None:
        name = _ALIASES.get(fmt.lower(), fmt.lower())
        if name not in INPUT_FORMATS:
            value_error("fmt", f"one of {', '.join(INPUT_FORMATS)}", repr(fmt))
        return name
    if os.fspath(path) == "-":
        return "txt"
    ext = Path(path).suffix.lower().lstrip(".")
    name = _ALIASES.get(ext, ext)
    if name not in INPUT_FORMATS:
        raise InputError(where=os.fspath(path), expected="an extension that names the format "
                         f"(.{', .'.join(INPUT_FORMATS)})", got=f"got {ext or '(none)'!r}",
                         fix="Rename the file, or name the format with `fmt`.")  # fmt: skip
    return name


def numbered_lines(stream: IO[bytes], where: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line without its line end) of a binary stream.

    Raises InputError naming ``where`` and the line for invalid UTF-8 or a NUL byte;
    a UTF-8 byte-order mark on the first line is dropped.
    """
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(where=f"{where}: line {number}", expected="UTF-8 text",
                             got=f"it is not valid UTF-8 ({e.reason} at byte {e.start})",
                             fix="Convert the file to UTF-8.") from None  # fmt: skip
        if b"\0" in raw:
            raise InputError(where=f"{where}: line {number}", expected="UTF-8 text",
                             got="it contains a NUL byte (binary, or UTF-16?)",
                             fix="Convert it to UTF-8 text.")  # fmt: skip
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield number, line.rstrip("\r\n")


# Items of an input: (1-based line or row number, text, the values of the fields asked for
# beside the text, by name: see Fields).
_Item = tuple[int, str, dict[str, Any]]

ID_FIELDS = ("id", "_id")  # the fields a row's id is taken from, unless told otherwise


@dataclass(frozen=True)
class Fields:
    """What is read beside each text.

    Attributes:
        value: one more field whose value goes beside each text as it is (``poolkit embed
            --chunks column:NAME`` reads spans so); required in every row.
        id: the field holding each row's id: a name (required in every row), ``"auto"``
            (``id``, else ``_id``, when the first row has one; else row numbers) or None
            (row numbers).
        keep: fields passed through beside the vectors (``--keep-columns``); required.
        title: a field joined before the text as ``(title + " " + text).strip()`` where a
            row has it, else ``text.strip()``: BEIR's corpus as MTEB (and ``poolkit
            compare``) reads it.
    """

    value: str | None = None
    id: str | None = None
    keep: tuple[str, ...] = ()
    title: str | None = None

    def wanted(self, names: Iterable[str]) -> dict[str, str]:
        """Role -> field for a file (or first record) with fields ``names``: ``"value"``,
        ``"id"``, ``"keep:NAME"``; an ``"auto"`` id resolved (absent: no id field)."""
        have = list(names)
        found = next((f for f in ID_FIELDS if f in have), None) if self.id == "auto" else self.id
        roles = {"value": self.value, "id": found, **{f"keep:{n}": n for n in self.keep}}
        return {role: name for role, name in roles.items() if name is not None}


def _got(asked: dict[str, str], record: Mapping[str, Any]) -> dict[str, Any]:
    """The values of one record by role; ``"id_column"``: the field the id came from."""
    out = {role: record[name] for role, name in asked.items()}
    if "id" in asked:
        out["id_column"] = asked["id"]
    return out


def _txt(stream: IO[bytes], where: str, column: str | None, fields: Fields) -> Iterator[_Item]:
    if column is not None:
        raise InputError(where=where, arg="text_column", expected="unset for a .txt input (it "
                         "has no columns)", got=repr(column), fix="Leave it unset.")  # fmt: skip
    asked = fields.wanted(())
    if asked:
        name = next(iter(asked.values()))
        raise InputError(where=where, expected=f"a column {name!r} to read", got="a .txt input "
                         "has no columns", fix="Use .jsonl, .csv, .tsv or .parquet.")  # fmt: skip
    for number, line in numbered_lines(stream, where):
        yield number, line, {}


def _json_values(stream: IO[bytes], where: str) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of each non-blank line of a JSON Lines stream."""
    for number, line in numbered_lines(stream, where):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(where=f"{where}: line {number}", expected="valid JSON",
                             got=f"it is not ({e.msg})") from None  # fmt: skip
        yield number, value


def _jsonl(stream: IO[bytes], where: str, column: str | None, fields: Fields) -> Iterator[_Item]:
    key = column or "text"
    asked: dict[str, str] | None = None  # resolved on the first object
    for number, value in _json_values(stream, where):
        if isinstance(value, str) and column is None and not fields.wanted(()):
            if asked:  # objects before: this line has none of their fields
                raise InputError(where=f"{where}: line {number}", expected="an object with "
                                 f"{', '.join(asked.values())}, as on the lines before",
                                 got="got a JSON string")  # fmt: skip
            asked = {}
            yield number, _unicode(value, where, number), {}
            continue
        if not isinstance(value, dict):
            names = [key, *fields.wanted(()).values()]
            wanted = " and ".join(f'a "{n}" field' for n in names)
            raise InputError(where=f"{where}: line {number}", expected=f"an object with {wanted}",
                             got=f"got a JSON {type(value).__name__}")  # fmt: skip
        if asked is None:
            asked = fields.wanted(value)
        for name in (key, *asked.values()):
            if name not in value:
                keys = ", ".join(map(str, value)) or "(none)"
                fix = "Choose one with `text_column`." if name == key else ""
                raise InputError(where=f"{where}: line {number}", expected=f'a "{name}" field',
                                 got=f"its fields are: {keys}", fix=fix)  # fmt: skip
        text = value[key]
        if not isinstance(text, str):
            raise InputError(where=f"{where}: line {number}", expected=f'a string in "{key}"',
                             got=f"got {type(text).__name__}")  # fmt: skip
        text = _unicode(text, where, number)
        if fields.title is not None:
            title = value.get(fields.title)
            if title is not None and not isinstance(title, str):
                raise InputError(where=f"{where}: line {number}",
                                 expected=f'a string in "{fields.title}"',
                                 got=f"got {type(title).__name__}")  # fmt: skip
            # BEIR's corpus as MTEB reads it (title: a row without one has just its text)
            text = text.strip() if title is None else (title + " " + text).strip()
        yield number, text, _got(asked, value)


def _unicode(text: str, where: str, number: int) -> str:
    # JSON can escape a lone surrogate ("\ud800"), which is not text and breaks tokenizers.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(where=f"{where}: line {number}", expected="text",
                         got=f"got an unpaired surrogate escape (\\u{ord(text[e.start]):04x} at "
                         f"character {e.start})", fix="Fix the JSON escape.") from None  # fmt: skip
    return text


def pick_column(columns: list[str], column: str | None, where: str) -> str:
    """The column that holds the texts: ``column`` if given, else ``"text"``, else the only one.

    Raises:
        InputError: ``column`` is not among ``columns``, or it is ``None`` and there is
            no ``"text"`` column among several; ``where`` (the file) starts the message.
    """
    if column is not None:
        if column not in columns:
            raise InputError(where=where, arg="text_column", expected="a column of the input",
                             got=repr(column), fix=f"Its columns: {', '.join(columns)}.")  # fmt: skip
        return column
    if "text" in columns:
        return "text"
    if len(columns) == 1:
        return columns[0]
    raise InputError(where=where, expected="a 'text' column", got=f"its columns are: "
                     f"{', '.join(columns)}", fix="Choose one with `text_column`.")  # fmt: skip


# A quoted TSV field may span at most this many lines; beyond it its quote is read as text.
_TSV_QUOTED_LINES = 10_000


def _tsv_rows(
    numbered: Iterator[tuple[int, str]], current: list[int], width: int = -1
) -> Iterator[list[str]]:
    """The records of TSV lines. Fields end at tabs and quotes are text (the TSV
    convention), so STS-B's ``"Hi," he said`` reads as written. A field quoted as csv
    writers (pandas, Python's csv, R) write TSV is unquoted: it opens with ``"``, doubles
    every quote inside, closes with ``"`` before a tab or the line end, and holds a quote,
    a tab or a line end (a field without those is unquoted only when the header's fields
    are all quoted: a writer that quotes every field). A record whose field count differs
    from the header's while its line split at tabs matches it is read split at tabs.
    ``current[0]``: the last line number read; ``width``: the field count of a file without
    a header row (-1: the first row is the header).
    """
    pending: collections.deque[tuple[int, str]] = collections.deque()

    def pull() -> tuple[int, str] | None:
        return pending.popleft() if pending else next(numbered, None)

    def quoted(line: str, pos: int, taken: list) -> tuple[str, str, int] | None:
        # (text, the line it closed on, index after the closing quote); None: not quoted.
        parts: list[str] = []
        mark = len(taken)
        i = pos + 1
        while True:
            j = line.find('"', i)
            if j < 0:
                parts.append(line[i:] + "\n")
                nxt = pull() if len(taken) - mark < _TSV_QUOTED_LINES else None
                if nxt is None:
                    break
                taken.append(nxt)
                line, i = nxt[1], 0
                continue
            parts.append(line[i:j])
            if line.startswith('"', j + 1):  # a doubled quote: one quote of text
                parts.append('"')
                i = j + 2
                continue
            if j + 1 < len(line) and line[j + 1] != "\t":
                break
            return "".join(parts), line, j + 1
        pending.extendleft(reversed(taken[mark:]))
        del taken[mark:]
        return None

    def fields_of(line: str, taken: list, all_quoted: bool) -> tuple[list[str], list[bool]]:
        fields: list[str] = []
        was_quoted: list[bool] = []
        pos = 0
        while True:
            got = quoted(line, pos, taken) if line.startswith('"', pos) else None
            if got is not None and (all_quoted or any(c in got[0] for c in '"\t\n')):
                text, line, pos = got
                fields.append(text)
                was_quoted.append(True)
                if pos == len(line):
                    return fields, was_quoted
                pos += 1  # the tab after the closing quote
                continue
            end = line.find("\t", pos)
            fields.append(line[pos:] if end < 0 else line[pos:end])
            was_quoted.append(False)
            if end < 0:
                return fields, was_quoted
            pos = end + 1

    all_quoted = width < 0  # every header field quoted: unquote every csv-quoted field
    while (item := pull()) is not None:
        number, line = item
        current[0] = number
        if not line:
            yield []  # a blank line: no fields, as csv reads it
            continue
        taken: list[tuple[int, str]] = []
        fields, was_quoted = fields_of(line, taken, all_quoted)
        if width < 0:
            width, all_quoted = len(fields), all(was_quoted)
        elif len(fields) != width and line.count("\t") + 1 == width:
            pending.extendleft(reversed(taken))
            fields, taken = line.split("\t"), []
        if taken:
            current[0] = taken[-1][0]
        yield fields


def _delimited_records(
    stream: IO[bytes], where: str, delimiter: str, names: list[str] | None = None
) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """The header (``names`` for a file without a header row) and the (line number, record)
    pairs of a CSV/TSV stream.

    CSV: quoted fields may hold the delimiter and line ends. TSV: :func:`_tsv_rows` (quotes
    are text unless a field is quoted as csv writes it). A record may have fewer fields
    than the header (the missing ones are absent from its dict) but never more.
    """
    numbered = numbered_lines(stream, where)
    current = [0]

    def lines() -> Iterator[str]:
        for number, line in numbered:
            current[0] = number
            # The line end goes back in: inside a quoted field it is part of the text.
            yield line + "\n"

    def bad(e: csv.Error) -> InputError:
        return InputError(where=f"{where}: line {current[0]}", expected="valid CSV",
                          got=f"it is not ({e})", fix="Check its quotes.")  # fmt: skip

    # strict: a quote left open would otherwise swallow the rest of the file silently.
    reader: Iterator[list[str]] = (
        csv.reader(lines(), delimiter=delimiter, strict=True)
        if delimiter == ","
        else _tsv_rows(numbered, current, -1 if names is None else len(names))
    )
    try:
        header = next(reader, []) if names is None else names
    except csv.Error as e:
        raise bad(e) from None
    most = f"the header's {len(header)}" if names is None else f"{len(header)} ({', '.join(names)})"

    def records() -> Iterator[tuple[int, dict[str, str]]]:
        try:
            for record in reader:
                if not record:
                    continue
                if len(record) > len(header):
                    raise InputError(where=f"{where}: line {current[0]}",
                                     expected=f"at most {most} fields",
                                     got=f"got {len(record)}",
                                     fix=f"Quote fields that contain {delimiter!r}.")  # fmt: skip
                yield current[0], dict(zip(header, record, strict=False))
        except csv.Error as e:
            raise bad(e) from None

    return header, records()


def _delimited(
    stream: IO[bytes], where: str, column: str | None, delimiter: str, fields: Fields
) -> Iterator[_Item]:
    header, records = _delimited_records(stream, where, delimiter)
    if not header:
        return
    name = pick_column(header, column, where)
    asked = {role: pick_column(header, f, where) for role, f in fields.wanted(header).items()}
    for number, record in records:
        for wanted in (name, *asked.values()):
            if wanted not in record:
                raise InputError(where=f"{where}: line {number}",
                                 expected=f"the header's {len(header)} fields",
                                 got=f"got {len(record)}: column {wanted!r} is missing")  # fmt: skip
        yield number, record[name], _got(asked, record)


def read_records(
    path: str | os.PathLike[str], fmt: str | None = None, *, names: list[str] | None = None
) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    """Column names and ``(row name, record)`` pairs of a jsonl/csv/tsv/parquet table,
    read by the loops :func:`read_rows` takes texts from (UTF-8 only, BOM dropped, NUL
    refused, quoted newlines kept, rows longer than the header refused). Row names:
    ``"path:LINE"`` or ``"path: row N"`` (Parquet), 1-based. ``names``: the columns of a
    csv/tsv file without a header row.

    Raises:
        InputError: a missing, undecodable or malformed file, naming the line or row.
    """
    kind = input_format(path, fmt)
    where = os.fspath(path)
    _exists(where)
    if kind == "parquet":
        pfile = _parquet_file(where, where)
        rows = _parquet_rows(pfile, where)
        return list(pfile.schema_arrow.names), [(f"{where}: row {n}", r) for n, r in rows]
    if kind == "txt":
        raise InputError(where=where, expected="a table (jsonl/csv/tsv/parquet)",
                         got="a .txt file has no columns")  # fmt: skip
    with open(where, "rb") as stream:
        if kind == "jsonl":
            columns: list[str] = []
            out: list[tuple[str, dict[str, Any]]] = []
            for number, value in _json_values(stream, where):
                if not isinstance(value, dict):
                    raise InputError(where=f"{where}: line {number}", expected="an object per line",
                                     got=f"got a JSON {type(value).__name__}")  # fmt: skip
                columns.extend(k for k in value if k not in columns)
                out.append((f"{where}:{number}", value))
            return columns, out
        header, records = _delimited_records(stream, where, _DELIMITERS[kind], names)
        return header, [(f"{where}:{number}", rec) for number, rec in records]


_DELIMITERS = {"csv": ",", "tsv": "\t"}


def _parquet_file(source: str | IO[bytes], where: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(source)
    except (OSError, pa.ArrowInvalid) as e:
        raise _not_parquet(where, e) from None


def _not_parquet(where: str, e: Exception) -> InputError:
    # pyarrow's reason may span lines; an error is one line.
    return InputError(where=where, expected="a readable Parquet file",
                      got=f"it is not ({' '.join(str(e).split())})")  # fmt: skip


def _parquet_rows(
    pfile: Any, where: str, columns: list[str] | None = None, rows: range | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number, row of ``columns``) of a Parquet file; ``rows``: only these
    (0-based), read from just the row groups that hold them."""
    import pyarrow as pa

    start, stop = (0, pfile.metadata.num_rows) if rows is None else (rows.start, rows.stop)
    sizes = [pfile.metadata.row_group(g).num_rows for g in range(pfile.num_row_groups)]
    ends = [0, *itertools.accumulate(sizes)]  # row group g holds rows ends[g]..ends[g + 1] - 1
    groups = [g for g in range(len(sizes)) if ends[g + 1] > start and ends[g] < stop]
    row = ends[groups[0]] if groups else 0
    try:
        # Small batches: memory stays bounded whatever the row groups' size.
        for batch in pfile.iter_batches(1024, groups, columns) if groups else ():
            lo, hi = max(start - row, 0), min(stop - row, batch.num_rows)
            if lo < hi:
                yield from enumerate(batch.slice(lo, hi - lo).to_pylist(), row + lo + 1)
            row += batch.num_rows
            if row >= stop:
                return
    except (OSError, pa.ArrowInvalid) as e:
        raise _not_parquet(where, e) from None


def _parquet(
    source: str | IO[bytes], where: str, column: str | None, fields: Fields, rows: range | None
) -> Iterator[_Item]:
    import pyarrow as pa

    pfile = _parquet_file(source, where)
    names = pfile.schema_arrow.names
    name = pick_column(names, column, where)
    kind = pfile.schema_arrow.field(name).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(where=where, expected=f"strings in column {name!r}", got=f"got {kind}")
    asked = {role: pick_column(names, f, where) for role, f in fields.wanted(names).items()}
    wanted = list(dict.fromkeys([name, *asked.values()]))
    for number, record in _parquet_rows(pfile, where, wanted, rows):
        if record[name] is None:
            raise InputError(where=f"{where}: row {number - 1}",
                             expected=f"a string in column {name!r}", got="got null")  # fmt: skip
        yield number, record[name], _got(asked, record)


def read_stream(
    source: str | IO[bytes],
    fmt: str,
    *,
    where: str,
    text_column: str | None = None,
    chunk_size: int = 4096,
    rows: range | None = None,
) -> Iterator[list[str]]:
    """The texts of an open input (e.g. a ``pyarrow.fs`` stream) named ``where``:
    :func:`read_rows` with ``source``, as lists; an input without texts yields nothing."""
    for part in read_rows(
        where, source=source, fmt=fmt, text_column=text_column, chunk_size=chunk_size, rows=rows
    ):
        yield part.texts


def _items(
    source: str | IO[bytes],
    kind: str,
    where: str,
    column: str | None,
    fields: Fields,
    rows: range | None = None,
) -> Iterator[_Item]:
    """The (line or row number, text, values by role) items of an input."""
    if kind == "parquet":
        return _parquet(source, where, column, fields, rows)
    if isinstance(source, str):
        type_error(
            "source", f"a binary stream for {kind}", "a str", "Open it with open(path, 'rb')."
        )
    if kind == "txt":
        items = _txt(source, where, column, fields)
    elif kind == "jsonl":
        items = _jsonl(source, where, column, fields)
    else:
        items = _delimited(source, where, column, _DELIMITERS[kind], fields)
    return items if rows is None else itertools.islice(items, rows.start, rows.stop)


def read_texts(
    path: str | os.PathLike[str],
    *,
    text_column: str | None = None,
    fmt: str | None = None,
    chunk_size: int = 4096,
    stdin: IO[bytes] | None = None,
) -> Iterator[list[str]]:
    """The texts of ``path`` in file order, ``chunk_size`` at a time: those of
    :func:`read_rows`' parts (same arguments, same errors)."""
    for part in read_rows(
        path, text_column=text_column, fmt=fmt, chunk_size=chunk_size, stdin=stdin
    ):
        yield part.texts


def _exists(where: str) -> None:
    if not os.path.exists(where):
        raise InputError(where=where, expected="an input file", got="there is no such file")
    if os.path.isdir(where):
        raise InputError(where=where, expected="an input file", got="got a directory")


@dataclass
class Rows:
    """One part of an input read by :func:`read_rows`.

    Attributes:
        texts: the texts, in file order.
        values: the other field's value beside each text (as the file holds it: a JSON
            value for ``.jsonl``, a string for ``.csv``/``.tsv``, a Python value for
            ``.parquet``); ``None`` each when no other field was asked for.
        where: where each text was read, for messages: ``"PATH: line N"`` (line-based
            formats, 1-based file lines) or ``"PATH: row N"`` (Parquet, 1-based).
        ids: each row's id as the file holds it (:attr:`Fields.id`), or None (row numbers).
        kept: the fields passed through (:attr:`Fields.keep`), name -> one value a row.
    """

    texts: list[str] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    ids: list[Any] | None = None
    kept: dict[str, list[Any]] = field(default_factory=dict)
    id_column: str | None = None

    def __len__(self) -> int:
        return len(self.texts)


def read_rows(
    path: str | os.PathLike[str],
    *,
    text_column: str | None = None,
    column: str | None = None,
    fmt: str | None = None,
    chunk_size: int = 4096,
    stdin: IO[bytes] | None = None,
    id_column: str | None = None,
    keep_columns: Sequence[str] = (),
    title_column: str | None = None,
    source: str | IO[bytes] | None = None,
    rows: range | None = None,
) -> Iterator[Rows]:
    """The texts of ``path`` in file order, ``chunk_size`` at a time, as :class:`Rows`.

    Args:
        path: a file, or ``"-"`` for standard input.
        text_column: the field/column holding the text (jsonl, csv, tsv, parquet).
        column: a field/column whose value goes beside each text; ``id_column``,
            ``keep_columns`` and ``title_column``: as :class:`Fields` takes them.
        fmt: the format, overriding the extension (one of :data:`INPUT_FORMATS`).
        stdin: the byte stream to read for ``"-"`` (default ``sys.stdin.buffer``).
        source: an open input to read instead, ``path`` only naming it (a URI, say): a
            binary stream, or for ``parquet`` a path or a seekable binary file; not closed.
        rows: only these texts (0-based, step 1): Parquet reads just the row groups that
            hold them, the other formats are parsed up to ``rows.stop``.

    Raises:
        InputError: missing file, undecodable or malformed line (with its number), missing
            column (with the available ones), a ``column`` asked of a ``.txt`` input, or no
            texts at all (unless ``source`` or ``rows`` is given: a piece may be empty).
    """
    fields = Fields(column, id_column, tuple(keep_columns), title_column)
    where = os.fspath(path)
    piece = source is not None or rows is not None
    if source is None and where != "-":
        _exists(where)
    kind = input_format(path, fmt)
    total = 0
    with contextlib.ExitStack() as stack:
        if source is None and where == "-":
            if kind == "parquet":
                raise InputError(arg="fmt", expected="a format stdin can carry", got="'parquet'",
                                 fix="Pass the Parquet file's path.")  # fmt: skip
            where = "<stdin>"
            source = stdin if stdin is not None else sys.stdin.buffer
        elif source is None:
            source = where if kind == "parquet" else stack.enter_context(open(where, "rb"))
        label = "row" if kind == "parquet" else "line"
        items = _items(source, kind, where, text_column, fields, rows)
        for part in _parts(items, where, label, fields, chunk_size):
            total += len(part)
            yield part
    if total == 0 and not piece:
        raise InputError(where=where, expected="texts", got="the input is empty")


def _parts(
    items: Iterable[_Item], where: str, label: str, fields: Fields, chunk_size: int
) -> Iterator[Rows]:
    """``items`` as :class:`Rows` of ``chunk_size`` texts (``label``: line or row); ``ids``
    None when no row had an id field (row numbers, as without)."""
    rest = iter(items)
    while batch := list(itertools.islice(rest, chunk_size)):
        part = Rows(kept={k: [] for k in fields.keep})
        ids: list[Any] = []
        for number, text, got in batch:
            part.texts.append(text)
            part.values.append(got.get("value"))
            part.where.append(f"{where}: {label} {number}")
            ids.append(got.get("id"))
            part.id_column = got.get("id_column", part.id_column)
            for name in fields.keep:
                part.kept[name].append(got[f"keep:{name}"])
        part.ids = None if part.id_column is None else ids
        yield part


def kept_column(values: list[Any]) -> Any:
    """A kept field (``--keep-columns``) as written: int64 when every value is an integer,
    else text (JSON values other than strings as their JSON)."""
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        import numpy as np

        return np.asarray(values, dtype=np.int64)
    return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values]


def read_all(path: str | os.PathLike[str], **kwargs: Any) -> list[str]:
    """All texts of ``path`` as one list (see :func:`read_texts`)."""
    return [t for chunk in read_texts(path, **kwargs) for t in chunk]
