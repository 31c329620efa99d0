"""``--id-column`` and ``--keep-columns`` on ``--engine ray``, as the local engine writes
them (:mod:`poolkit.cli._rows`): the scanned ids checked by its rules before any model
loads; rows travel with their row number in ``id`` (blocks are cut, sorted and
checkpointed by it) and their own id in ``input_id``, put in ``id`` as each shard is
written; each file's checkpoint record holds a digest of its ids.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from types import SimpleNamespace
from typing import Any

from poolkit.cli._rows import UserIds, keep_list
from poolkit.errors import InputError

__all__ = ["check_ids", "ids_digest", "keep_for_ray", "rows_setting", "user_rows"]

# Columns a Ray shard holds besides the vectors: --keep-columns may not take their names.
_OWN = ("text_id", "input_id")


def keep_for_ray(args: argparse.Namespace) -> tuple[str, ...]:
    """--keep-columns as names (refused in one line as on the local engine, and where a name
    is one of the shard's own columns)."""
    names = keep_list(args)
    clash = [n for n in names if n in _OWN]
    if clash:
        raise InputError(f"--keep-columns: {clash[0]!r} is a column poolkit writes itself; "
                         "keep other fields.")  # fmt: skip
    return names


def check_ids(corpus: Any) -> None:
    """The scanned ids, files in order, by the local engine's rules; also refused: ids in
    one file after a file whose rows have none."""
    seen = UserIds()
    bare: str | None = None  # the first file with rows but no id field
    for file, ids, first, rows in zip(corpus.files, corpus.ids, corpus.offsets, corpus.counts,
                                      strict=True):  # fmt: skip
        if rows == 0:
            continue
        if ids is None:
            part = SimpleNamespace(ids=None, where=[file.path], id_column=None)
            seen.check(part, first)
            bare = bare or file.path
            continue
        if bare is not None:
            raise InputError(f"{ids.where[0]}: an id in {ids.column!r}, but the rows of {bare} "
                             "have none; give every row an id.")  # fmt: skip
        seen.check(SimpleNamespace(ids=ids.ids, where=ids.where, id_column=ids.column), first)


def rows_setting(corpus: Any) -> dict[str, Any] | None:
    """How ids and kept fields were read, for the manifest (None: row numbers, nothing
    kept), as the local engine records it."""
    column = next((f.column for f in corpus.ids if f is not None), None)
    if column is None and not corpus.keep_columns:
        return None
    return {"id_column": column, "keep_columns": list(corpus.keep_columns)}


def ids_digest(ids: Any) -> str | None:
    """SHA-256 of one file's ids (a :class:`~poolkit.ray.FileIds`, or None: row numbers)."""
    if ids is None:
        return None
    return hashlib.sha256(json.dumps([ids.column, ids.ids]).encode("utf-8")).hexdigest()


def user_rows(table: Any) -> Any:
    """A shard's table with each row's own id (``input_id``) as ``id``, its type kept;
    a table without ``input_id`` as it is."""
    from poolkit.ray import INPUT_ID

    if INPUT_ID not in table.column_names:
        return table
    own = table.column(INPUT_ID)
    table = table.drop_columns([INPUT_ID])
    return table.set_column(table.column_names.index("id"), "id", own)
