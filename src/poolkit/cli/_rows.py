"""``poolkit embed``'s rows as the user names them: ``--id-column`` (ids keep their type;
a missing, duplicate or mixed-type one is refused naming the row), ``--keep-columns`` (fields
written beside the vectors), and a BEIR folder or its ``corpus.jsonl`` read as ``poolkit
compare`` reads it (MTEB's title + text join, ids from ``_id``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from poolkit.errors import InputError
from poolkit.io.readers import kept_column  # the Ray engine's pieces write them too

__all__ = ["BEIR_JOIN", "UserIds", "add_row_arguments", "beir_input", "keep_list", "kept_column",
           "row_setup"]  # fmt: skip

BEIR_JOIN = 'title + " " + text (MTEB\'s join; text alone where a document has no title)'


def add_row_arguments(parser: argparse.ArgumentParser) -> None:
    """--id-column and --keep-columns."""
    parser.add_argument("--id-column", default=None, metavar="C",
                        help="field/column holding each row's id, written as `id` with its "
                        "type kept (default: a field named id or _id when the input has one, "
                        "else the row number)")  # fmt: skip
    parser.add_argument("--keep-columns", default=None, metavar="A,B",
                        help="fields/columns written beside the vectors, as they are "
                        "(.parquet, .jsonl)")  # fmt: skip


def keep_list(args: argparse.Namespace) -> tuple[str, ...]:
    """--keep-columns as names; refused in one line where they cannot go."""
    if not args.keep_columns:
        return ()
    names = tuple(n.strip() for n in args.keep_columns.split(",") if n.strip())
    if not names:
        raise InputError(arg="--keep-columns", expected="field names joined with commas, e.g. "
                         "--keep-columns title,url", got=repr(args.keep_columns))  # fmt: skip
    if str(args.output).lower().endswith((".npy", ".npz")):
        raise InputError(arg="--keep-columns", expected="given with a .parquet or .jsonl output",
                         got=f"a .npy or .npz output ({args.output}), which holds no other "
                         "column", fix="Write .parquet or .jsonl.")  # fmt: skip
    clash = [n for n in names if n in ("id", "chunk", "start", "end", "text")]
    if clash:
        raise InputError(arg="--keep-columns", expected="fields other than the columns poolkit "
                         "writes itself", got=repr(clash[0]), fix="Keep other fields.")  # fmt: skip
    return names


def beir_input(args: argparse.Namespace) -> str | None:
    """Point ``args.input`` at a BEIR folder's ``corpus.jsonl`` (a folder holding one);
    returns the title field to join (``"title"``) for a BEIR corpus (its text field:
    ``--text-column``, default ``text``, as ``compare --text-column`` reads it), else
    None."""
    if args.input == "-":
        return None
    path = Path(args.input)
    if path.is_dir() and (path / "corpus.jsonl").is_file():
        args.input = str(path / "corpus.jsonl")
        path = path / "corpus.jsonl"
    if path.name == "corpus.jsonl" and args.input_format in (None, "jsonl"):
        if args.id_column is None:
            args.id_column = "_id"
        return "title"
    return None


class UserIds:
    """The ids of one job's rows, checked as they are read: each present, of one type
    (integer or text), and unique over the whole input."""

    def __init__(self) -> None:
        self.column: str | None = None
        self.kind: type | None = None
        self._seen: dict[Any, int] = {}

    def check(self, part: Any, first: int) -> list[Any] | None:
        """The ids of ``part`` (:class:`poolkit.io.readers.Rows`, first text ``first``),
        or None (row numbers); raises :class:`InputError` naming the row."""
        if part.ids is None:
            if self.column is not None:
                raise InputError(where=part.where[0], expected=f"a {self.column!r} field, as the "
                                 "rows before have", got="there is none",
                                 fix="Give every row an id.")  # fmt: skip
            return None
        self.column = part.id_column
        for k, value in enumerate(part.ids):
            where = part.where[k]
            if value is None or (isinstance(value, str) and not value.strip()):
                raise InputError(where=where, expected=f"an id in {self.column!r}", got="it is "
                                 "empty", fix="Give every row an id, or name another field "
                                 "with --id-column.")  # fmt: skip
            kind = int if isinstance(value, int | np.integer) else type(value)
            if isinstance(value, bool) or kind not in (int, str):
                raise InputError(where=where, expected=f"an integer or text id in {self.column!r}",
                                 got=f"got {value!r} ({type(value).__name__})")  # fmt: skip
            if self.kind is None:
                self.kind = kind
            elif kind is not self.kind:
                raise InputError(where=where, expected=f"a {self.kind.__name__} id, as the ids "
                                 "before", got=f"got {value!r} ({kind.__name__})",
                                 fix=f"Use one type in {self.column!r}.")  # fmt: skip
            if value in self._seen:
                raise InputError(where=where, expected=f"a unique id in {self.column!r}",
                                 got=f"got {value!r}, also the id of text "
                                 f"{self._seen[value]}")  # fmt: skip
            self._seen[value] = first + k
        return list(part.ids)


def row_setup(args: argparse.Namespace) -> tuple[str | None, tuple[str, ...]]:
    """:func:`beir_input` (a BEIR corpus: recorded in ``args``, and said in one line unless
    --quiet) and :func:`keep_list`."""
    title = beir_input(args)
    if title is not None:
        args.documents_read_as = BEIR_JOIN  # the provenance record's
        if not args.quiet:
            print(f"poolkit: {args.input}: a BEIR corpus: each document is {BEIR_JOIN}; ids "
                  "from _id.", file=sys.stderr)  # fmt: skip
    return title, keep_list(args)
