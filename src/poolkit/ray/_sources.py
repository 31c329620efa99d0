"""Input files to a Ray ``Dataset`` of ``id``, ``text_id``, ``text``, parsed by
:mod:`poolkit.io.readers` as ``poolkit embed`` parses them. :meth:`Corpus.scan` counts each
file's rows in parallel Ray tasks (a bad line surfaces before any model loads); then
:meth:`Corpus.dataset` streams the files in blocks, row ``r`` of file ``k`` getting
``id = rows of files 0..k-1 + r``: ``poolkit embed``'s id for the files concatenated in
sorted order.
"""

from __future__ import annotations

import glob
import io
import math
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.errors import RunError
from poolkit.io.readers import INPUT_FORMATS, InputError, Rows, input_format
from poolkit.ray._require import quiet_remote_args_notice, require_ray

__all__ = [
    "INPUT_ID",
    "Corpus",
    "FileIds",
    "InputFile",
    "iter_file_rows",
    "list_inputs",
    "read_corpus",
]

INPUT_ID = "input_id"  # the column of a row's own id (``id_column``), beside ``id``

_EXTENSIONS = {*INPUT_FORMATS, "text", "json", "ndjson", "pq"}
# Pieces of one text file (each parses the file up to its start: cost <= pieces x file).
MAX_TEXT_PIECES = 16


@dataclass(frozen=True)
class InputFile:
    """One input file: ``path`` for opening it (local path or URI), ``name`` for
    ``text_id`` (relative to the input folder, or the file name), ``fmt`` its format."""

    path: str
    name: str
    fmt: str


def _is_uri(path: str) -> bool:
    return "://" in path


def _skipped(name: str) -> bool:
    # Hidden files and markers such as _SUCCESS are not data.
    return any(part.startswith((".", "_")) for part in Path(name).parts)


def _wanted(name: str, fmt: str | None) -> bool:
    known = fmt is not None or Path(name).suffix.lower().lstrip(".") in _EXTENSIONS
    return known and not _skipped(name)


def list_inputs(source: str | os.PathLike[str], fmt: str | None = None) -> list[InputFile]:
    """The files of ``source``, sorted by name.

    Args:
        source: a file; a folder (every file below it with a known extension, hidden and
            ``_``-prefixed names skipped); a glob (``data/*.jsonl``, ``**`` allowed) of
            local files; or a URI any pyarrow filesystem understands (``s3://b/dir``).
        fmt: read every file as this format instead of going by its extension.

    Raises:
        InputError: nothing matches, or a file's format cannot be told.
    """
    text = os.fspath(source)
    if text == "-":
        raise InputError("-: Ray cannot read stdin; pass a file, a folder or a glob.")
    files: list[InputFile]
    if _is_uri(text):
        files = _list_uri(text, fmt)
    elif glob.has_magic(text):
        base = Path(text.split("*")[0].split("?")[0].split("[")[0])
        base = base if text.endswith(os.sep) or base.is_dir() else base.parent
        paths = sorted(p for p in glob.glob(text, recursive=True) if os.path.isfile(p))
        files = [InputFile(p, os.path.relpath(p, base), "") for p in paths]
        files = [f for f in files if not _skipped(f.name)]
    elif os.path.isdir(text):
        paths = sorted(p for p in Path(text).rglob("*") if p.is_file())
        files = [InputFile(str(p), str(p.relative_to(text)), "") for p in paths]
        files = [f for f in files if _wanted(f.name, fmt)]
    elif os.path.isfile(text):
        files = [InputFile(text, os.path.basename(text), "")]
    else:
        raise InputError(f"{text}: no such file or folder.")
    if not files:
        raise InputError(
            f"{text}: no input files found (looked for .{', .'.join(INPUT_FORMATS)}; "
            "name the format with `fmt` to read other files)."
        )
    return [InputFile(f.path, f.name, input_format(f.path, fmt)) for f in files]


def _list_uri(uri: str, fmt: str | None) -> list[InputFile]:
    import pyarrow.fs as pafs

    if glob.has_magic(uri.split("://", 1)[1]):
        raise InputError(f"{uri}: globs work on local paths only; pass the folder instead.")
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        info = fs.get_file_info(root)
    except Exception as e:
        raise InputError(f"{uri}: cannot open ({e}).") from None
    scheme = uri.split("://", 1)[0]
    if info.type == pafs.FileType.File:
        return [InputFile(uri, info.base_name, "")]
    if info.type != pafs.FileType.Directory:
        raise InputError(f"{uri}: no such file or folder.")
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    out = []
    for entry in sorted(found, key=lambda e: e.path):
        name = os.path.relpath(entry.path, root)
        if entry.type == pafs.FileType.File and _wanted(name, fmt):
            out.append(InputFile(f"{scheme}://{entry.path}", name, ""))
    return out


def iter_file_rows(
    file: InputFile,
    *,
    text_column: str | None = None,
    chunk_size: int = 4096,
    rows: range | None = None,
    id_column: str | None = None,
    keep_columns: Sequence[str] = (),
) -> Iterator[Rows]:
    """Rows of one file in file order (``rows``: only these, 0-based), ``chunk_size`` at a
    time, parsed exactly as by :func:`poolkit.io.readers.read_rows` (with ``id_column``
    and ``keep_columns`` as it takes them). An empty file yields nothing."""
    from poolkit.io import readers

    how = {"fmt": file.fmt, "text_column": text_column, "chunk_size": chunk_size, "rows": rows,
           "id_column": id_column, "keep_columns": tuple(keep_columns)}  # fmt: skip
    if not _is_uri(file.path):
        if os.path.getsize(file.path):
            yield from readers.read_rows(file.path, **how)
        return
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(file.path)
    if file.fmt == "parquet":
        with fs.open_input_file(path) as handle:  # Parquet needs random access
            yield from readers.read_rows(file.path, source=handle, **how)
        return
    # pyarrow streams cannot iterate lines (readline raises); the buffer adds that.
    with fs.open_input_stream(path) as raw, io.BufferedReader(raw) as stream:
        yield from readers.read_rows(file.path, source=stream, **how)


@dataclass(frozen=True)
class FileIds:
    """The ids one input file gives its rows (``id_column``), and where each was read:
    ``"<path>: <label> <number>"``."""

    column: str
    ids: list[Any]
    label: str
    numbers: np.ndarray
    path: str

    @property
    def where(self) -> _Where:
        return _Where(self)


class _Where:
    """``where[k]``: how messages name row ``k`` of a :class:`FileIds` (built on demand)."""

    def __init__(self, file: FileIds) -> None:
        self.file = file

    def __getitem__(self, k: int) -> str:
        return f"{self.file.path}: {self.file.label} {int(self.file.numbers[k])}"


def _scan_file(
    file: InputFile,
    text_column: str | None,
    id_column: str | None = None,
    keep_columns: Sequence[str] = (),
) -> tuple[int, FileIds | None]:
    """A file's row count, and its ids when ``id_column`` finds any (else None); the
    ``keep_columns`` are read too, so that a row without one is named now."""
    n, column, ids, numbers = 0, None, [], []
    rows = iter_file_rows(file, text_column=text_column, id_column=id_column,
                          keep_columns=keep_columns)  # fmt: skip
    for part in rows:
        n += len(part)
        if part.ids is not None:
            column = part.id_column
            ids.extend(part.ids)
            numbers.extend(int(w.rsplit(" ", 1)[1]) for w in part.where)
    if column is None:
        return n, None
    label = "row" if file.fmt == "parquet" else "line"
    return n, FileIds(column, ids, label, np.asarray(numbers, np.int64), file.path)


def _piece_rows(
    file: InputFile, start: int, stop: int, text_column: str | None, **fields: Any
) -> Rows:
    """Rows ``start..stop-1`` (file rows, 0-based) of one file: a Parquet file's row groups
    that hold them; a text file parsed up to ``stop`` (pieces per file are capped, see
    :meth:`Corpus.pieces`, so that this stays linear in the file size)."""
    out = Rows(ids=[], kept={k: [] for k in fields.get("keep_columns", ())})
    for part in iter_file_rows(file, text_column=text_column, rows=range(start, stop), **fields):
        out.texts.extend(part.texts)
        if part.ids is None:  # row numbers
            out.ids = None
        elif out.ids is not None:
            out.ids.extend(part.ids)
        for name, values in part.kept.items():
            out.kept[name].extend(values)
    return out


def _read_pieces(
    batch: dict[str, np.ndarray],
    *,
    text_column: str | None,
    keep_columns: Sequence[str] = (),
    id_type: str | None = None,
) -> Any:
    """Ray Data UDF: piece descriptors in, their rows (``id``, ``text_id``, ``text``; with
    ``id_type`` the row's own id as ``input_id``, and the ``keep_columns``) out."""
    import pyarrow as pa

    from poolkit.io.readers import kept_column

    tables = []
    for path, name, fmt, offset, start, stop, id_column in zip(
        batch["path"], batch["name"], batch["fmt"], batch["offset"], batch["start"],
        batch["stop"], batch["id_column"], strict=True,
    ):  # fmt: skip
        file = InputFile(str(path), str(name), str(fmt))
        ask = str(id_column) if id_type is not None else None
        rows = _piece_rows(file, int(start), int(stop), text_column, id_column=ask,
                           keep_columns=keep_columns)  # fmt: skip
        if len(rows.texts) != stop - start:
            raise RunError(
                f"{file.path}: expected rows {start}..{stop - 1}, but the file now has "
                f"{start + len(rows.texts)} rows; did it change during the job?"
            )
        local = np.arange(int(start), int(stop), dtype=np.int64)
        columns = {
            "id": pa.array(local + int(offset), pa.int64()),
            "text_id": pa.array([f"{name}:{r}" for r in local.tolist()], pa.string()),
            "text": pa.array(rows.texts, pa.string()),
        }
        if id_type is not None:  # checked by the driver: present, unique, of one type
            kind = pa.int64() if id_type == "int" else pa.string()
            columns[INPUT_ID] = pa.array(rows.ids, kind)
        for key, values in rows.kept.items():
            kept = kept_column(values)
            columns[key] = pa.array(
                kept, pa.int64() if isinstance(kept, np.ndarray) else pa.string()
            )
        tables.append(pa.table(columns))
    return pa.concat_tables(tables)


@dataclass(frozen=True)
class Corpus:
    """Input files with their row counts; ``offsets[k]`` is the id of file ``k``'s first row.

    Attributes:
        files: the files, sorted by name.
        counts: texts per file.
        text_column: the field/column read (``None``: ``text`` or the only column).
        ids: per file, the ids its rows carry (:class:`FileIds`), or None (row numbers);
            empty when no ``id_column`` was asked for.
        keep_columns: fields read beside each text, as columns of the same names.
    """

    files: list[InputFile]
    counts: list[int]
    text_column: str | None = None
    ids: tuple[FileIds | None, ...] = ()
    keep_columns: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def offsets(self) -> list[int]:
        return [int(x) for x in np.cumsum([0, *self.counts])[:-1]]

    @classmethod
    def scan(
        cls,
        source: str | os.PathLike[str],
        *,
        text_column: str | None = None,
        fmt: str | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
    ) -> Corpus:
        """List ``source`` (:func:`list_inputs`) and count each file's texts in parallel
        Ray tasks (:func:`read_concurrency` at once), which parse every file, so an :class:`InputError` comes now, not halfway
        through the job. ``id_column`` (a field, or ``"auto"``: ``id`` or ``_id`` where a
        file has one) also collects each file's ids; ``keep_columns`` are read too.

        Raises:
            InputError: as :func:`list_inputs`, a malformed file, a row without an asked
                field, or no texts at all.
        """
        ray = require_ray()
        files = list_inputs(source, fmt)
        keep = tuple(keep_columns)
        # Zero CPUs: reading must not wait for CPUs that embedding actors hold.
        count = ray.remote(num_cpus=0, max_retries=3)(_scan_file)
        try:
            found = _bounded(ray, [lambda f=f: count.remote(f, text_column, id_column, keep)
                                   for f in files])  # fmt: skip
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            raise (cause if isinstance(cause, Exception) else e) from None
        counts = [int(n) for n, _ in found]
        ids = tuple(i for _, i in found) if id_column is not None else ()
        corpus = cls(files, counts, text_column, ids, keep)
        if corpus.rows == 0:
            raise InputError(f"{os.fspath(source)}: no texts found (the input is empty).")
        return corpus

    def pieces(self, block_rows: int, only: Collection[int] | None = None) -> list[dict[str, Any]]:
        """Row ranges ``[start, stop)`` of at most ``block_rows`` rows per file (of the
        files whose indices are in ``only``, if given; ids stay the whole corpus's); a
        text file gets at most :data:`MAX_TEXT_PIECES` pieces, since reading a piece of
        it means parsing the file up to the piece."""
        out = []
        for k, (f, offset, n) in enumerate(zip(self.files, self.offsets, self.counts, strict=True)):
            if only is not None and k not in only:
                continue
            size = block_rows
            if f.fmt != "parquet":
                size = max(size, math.ceil(n / MAX_TEXT_PIECES))
            for start in range(0, n, size):
                column = self.ids[k].column if self.ids and self.ids[k] is not None else ""
                out.append({"path": f.path, "name": f.name, "fmt": f.fmt, "offset": offset,
                            "start": start, "stop": min(n, start + size),
                            "id_column": column})  # fmt: skip
        return out

    @property
    def id_type(self) -> str | None:
        """``"int"`` or ``"str"``: the type of the rows' own ids (the first file's first
        id), or None when they have none (row numbers)."""
        first = next((f for f in self.ids if f is not None and f.ids), None)
        if first is None:
            return None
        return "int" if isinstance(first.ids[0], int | np.integer) else "str"

    def dataset(self, block_rows: int = 1024, only: Collection[int] | None = None) -> Any:
        """A lazy ``ray.data.Dataset`` of ``id`` int64, ``text_id`` string
        (``"<file name>:<row in file>"``, rows 0-based), ``text`` string (and with ids of
        the rows' own ``input_id``, int64 or string; then the ``keep_columns``): one block
        per piece (:meth:`pieces`; ``only``: just these files), read by a zero-CPU task
        retried if its worker dies."""
        ray = require_ray()
        if not isinstance(block_rows, int) or block_rows < 1:
            value_error("block_rows", "a positive integer", repr(block_rows))
        items = self.pieces(block_rows, only)
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        with quiet_remote_args_notice():
            return ds.map_batches(
                _read_pieces,
                batch_size=1,
                fn_kwargs={
                    "text_column": self.text_column,
                    "id_type": self.id_type,
                    "keep_columns": self.keep_columns,
                },
                num_cpus=0,
                max_retries=3,
                **_task_pool(ray, read_concurrency(ray)),
            )

    def balanced_block_rows(self, workers: int, limit: int = 4096) -> int:
        """Rows per block so that each worker gets about 4 blocks, at most ``limit``."""
        return max(1, min(limit, math.ceil(self.rows / (4 * max(1, workers)))))


def read_concurrency(ray: Any) -> int:
    """Zero-CPU reading tasks in flight at once: the cluster's CPUs (at least 2). Zero-CPU
    tasks are not held back by resources, and each one in flight takes a worker process of
    its own: unbounded, a job over many files started dozens of Python processes (Ray warns
    of 4x its expected start-up concurrency) before the first text was embedded."""
    return max(2, int(ray.cluster_resources().get("CPU", 0)))


def _task_pool(ray: Any, size: int) -> dict[str, Any]:
    """``map_batches`` keywords for at most ``size`` tasks at once: ``compute=`` where
    ``TaskPoolStrategy`` takes a size (newer Ray, which deprecates ``concurrency=``)."""
    import inspect

    strategy = getattr(ray.data, "TaskPoolStrategy", None)
    if strategy is not None and "size" in inspect.signature(strategy).parameters:
        return {"compute": strategy(size=size)}
    return {"concurrency": size}


def _bounded(ray: Any, submit: Sequence[Any]) -> list[Any]:
    """``ray.get`` of each ``submit()``'s task, in order, at most :func:`read_concurrency`
    in flight."""
    limit, refs, pending = read_concurrency(ray), [], []
    for make in submit:
        if len(pending) >= limit:
            _, pending = ray.wait(pending, num_returns=1)
        refs.append(make())
        pending.append(refs[-1])
    return ray.get(refs)


def read_corpus(
    source: str | os.PathLike[str],
    *,
    text_column: str | None = None,
    fmt: str | None = None,
    block_rows: int = 1024,
) -> Any:
    """``Corpus.scan(source, ...).dataset(block_rows)``: a ``Dataset`` of ``id``,
    ``text_id``, ``text`` (see :class:`Corpus`)."""
    return Corpus.scan(source, text_column=text_column, fmt=fmt).dataset(block_rows)
