"""Embeddings to files, part by part, published atomically.

:func:`open_writer` returns an :class:`EmbeddingWriter`: :meth:`~EmbeddingWriter.write` per
part (row ids + one ``(n, D)`` array per strategy), then :meth:`~EmbeddingWriter.close`
renames the temporary file into place; an error (or :meth:`~EmbeddingWriter.abort`)
removes it: a half-written output never exists under the output's name.

- ``.npy``: one float32 ``(N, D)`` matrix in input order (one strategy only).
- ``.parquet``: ``id`` (int64) plus one ``fixed_size_list<float32>[D]`` column per strategy.
- ``.jsonl``: one object per row: ``{"id": i, "<strategy>": [...], ...}``.
- ``.npz``: sparse recipes only (one): ``scipy.sparse.load_npz`` reads the CSR matrix.

A ragged output (a multi-vector recipe: ``(tokens, D)`` vectors per text; ``kind``
``"multivector"``) is written from parts of one row per *token*, ``ids`` giving each
token's text (a text's tokens together, texts in order), and stored one row per text:

- ``.parquet``: ``id`` plus a ``large_list<fixed_size_list<float32>[D]>`` column;
- ``.npz``: ``ids`` ``(n,)``, ``offsets`` ``(n + 1,)`` and one flat ``vectors``
  ``(total tokens, D)`` matrix (text ``i``'s vectors are ``vectors[offsets[i]:offsets[i+1]]``),
  streamed through a temporary file, written with fixed zip timestamps (the same vectors give
  the same bytes);
- ``.jsonl``: ``{"id": i, "<recipe>": [[...], ...]}``. ``.npy`` has no place for it.

Per-token integer columns (``poolkit embed --token-offsets``: ``offsets``, ``(tokens, 2)``)
go between ``id`` and the vectors as one list per text (Parquet ``large_list`` of
``fixed_size_list<int64>[2]``; JSON Lines ``[[start, end], ...]``); ``.npz`` takes none.

A sparse recipe's parts are ``scipy.sparse`` CSR arrays, stored as
:mod:`poolkit.sparse.files` says (``.npy`` refuses them, ``.npz`` refuses dense ones).

A part may carry extra columns, written between ``id`` and the vectors (``.parquet``,
``.jsonl``; ``.npy`` has no place for them): ``poolkit embed --chunks`` writes ``chunk``,
``start``, ``end`` (int64) and ``text`` (string) so, ``id`` then naming each chunk's
document. Integer arrays are written as int64, lists of strings as strings.

A recipe with an output stage (``mean/256/int8``) keeps its stored dtype: float16, int8
or uint8 (packed bits: ``ceil(D / 8)`` bytes a row), as ``fixed_size_list<int8>`` etc. in
Parquet and integers in JSON Lines. ``metadata`` (JSON-ready) goes into the Parquet
schema's metadata under ``poolkit``; :func:`sidecar_path` names the JSON file written
beside a ``.npy`` or ``.jsonl`` output for it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from poolkit._errors import already_exists, value_error
from poolkit.errors import InputError
from poolkit.io.atomic import AtomicFile
from poolkit.sparse.csr import canonical_csr
from poolkit.sparse.files import NpzParts, is_sparse, jsonl_values, parquet_columns

__all__ = ["OUTPUT_FORMATS", "EmbeddingWriter", "open_writer"]

OUTPUT_FORMATS = ("npy", "parquet", "jsonl", "npz")
RAGGED_FORMATS = ("parquet", "npz", "jsonl")
_NPY_HEADER = 128  # bytes reserved for the .npy header, written once the row count is known
_STORED = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int8), np.dtype(np.uint8))


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """The JSON beside a ``.npy``/``.jsonl`` output that records its recipe's output stage
    (dims, precision, stored shape, int8/uint8 ranges): ``OUTPUT + ".poolkit.json"``."""
    return Path(os.fspath(path) + ".poolkit.json")


def stored(arr: np.ndarray) -> np.ndarray:
    """``arr`` as stored: float16/int8/uint8 as they are, anything else as float32; a
    sparse part as a canonical CSR array (:func:`poolkit.sparse.canonical_csr`)."""
    if is_sparse(arr):
        return canonical_csr(arr)  # type: ignore[no-any-return]
    a = np.asarray(arr)
    return np.ascontiguousarray(a if a.dtype in _STORED else a.astype(np.float32))


def output_format(path: str | os.PathLike[str]) -> str:
    ext = Path(path).suffix.lower().lstrip(".")
    ext = {"pq": "parquet", "ndjson": "jsonl"}.get(ext, ext)
    if ext not in OUTPUT_FORMATS:
        raise InputError(where=os.fspath(path), expected="an output name ending in "
                         f".{', .'.join(OUTPUT_FORMATS)}", got=f"it ends in {'.' + ext if ext else 'no extension'}")  # fmt: skip
    return ext


def jsonl_rows(
    ids: np.ndarray,
    arrays: Mapping[str, np.ndarray],
    strategies: list[str],
    columns: Mapping[str, Any] | None = None,
) -> str:
    """JSON Lines of a part (a block of rows), each line ending in a newline:
    ``{"id": i, <columns>..., "<strategy>": [...], ...}``; ``ids`` ``(n,)``, ``arrays``
    name -> ``(n, D)``, ``columns`` (optional) name -> ``n`` ints or strings."""
    lists: dict[str, list[Any]] = {}
    for name in strategies:
        if is_sparse(arrays[name]):
            lists[name] = jsonl_values(arrays[name])
            continue
        a = np.asarray(arrays[name])
        lists[name] = (a if a.dtype.kind in "iu" else a.astype(np.float32)).tolist()
    extra = {  # int64 numbers, or strings as they are
        name: values.astype(np.int64).tolist() if isinstance(values, np.ndarray) else list(values)
        for name, values in (columns or {}).items()
    }
    rows = (
        {"id": i, **{n: v[k] for n, v in extra.items()}, **{n: lists[n][k] for n in strategies}}
        for k, i in enumerate(id_values(ids))
    )
    return "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in rows)


def row_ids(ids: Any) -> np.ndarray | list[str]:
    """Row ids as written: int64 numbers (an integer array or list of ints), else the
    strings as they are (a user's ids: ``--id-column``)."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
        return ids.astype(np.int64)
    values = list(ids)
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=np.int64).reshape(-1)
    return [str(v) for v in values]


def id_values(ids: Any) -> list[Any]:
    """Row ids as a list of ints or strings (:func:`row_ids`)."""
    out = row_ids(ids)
    return out.tolist() if isinstance(out, np.ndarray) else out


class EmbeddingWriter:
    """Streams parts into a temporary file; :meth:`close` renames it to ``path``. ``kind``
    ``"multivector"``: a ragged output (parts of token rows; see the module docstring)."""

    def __init__(
        self,
        path: Path,
        fmt: str,
        strategies: list[str],
        overwrite: bool,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
    ) -> None:
        check_kind(path, fmt, strategies, kind)
        self.path = path
        self.ragged = kind == "multivector"
        self._tokens: IO[bytes] | None = None  # ragged .npz: the flat vectors, raw
        self._offsets: list[np.ndarray] = []  # ragged .npz: each part's token ends
        self._text_ids: list[np.ndarray] = []
        self.metadata = dict(metadata) if metadata else None
        self._dtype: np.dtype[Any] | None = None
        self.fmt = fmt
        self.strategies = strategies
        self.overwrite = overwrite
        self.rows = 0
        self._dims: dict[str, int] = {}
        self._columns: list[str] | None = None  # the extra columns, set by the first part
        self._out = AtomicFile(path)
        self._file: IO[bytes] | None = self._out.file
        self._parquet: Any = None
        self._npz: Any = None
        # A .npy/.npz output's row ids once one is not its row number (a user's
        # --id-column), else None: the record beside the file keeps them.
        self.ids: list[Any] | None = None
        if fmt == "npy":
            self._file.write(b"\0" * _NPY_HEADER)
        elif fmt == "npz" and self.ragged:
            import tempfile

            self._tokens = tempfile.TemporaryFile(dir=path.parent, prefix=".poolkit-tokens-")
        elif fmt == "npz":
            self._npz = NpzParts(path.parent)

    def __enter__(self) -> EmbeddingWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(
        self,
        ids: np.ndarray,
        arrays: Mapping[str, np.ndarray],
        columns: Mapping[str, Any] | None = None,
    ) -> None:
        """Append a part: ``ids`` ``(n,)`` int64 row ids, ``arrays`` name -> ``(n, D)``,
        ``columns`` (optional; not for ``.npy``) name -> ``n`` ints (an integer array) or
        strings (a list), written between ``id`` and the vectors; every part gives the
        same names."""
        if self._file is None:
            raise InputError(expected="an open writer", got="it was already closed")
        ids = row_ids(ids)
        kept = {name: stored(arrays[name]) for name in self.strategies}
        for name, arr in kept.items():
            dim = self._dims.setdefault(name, arr.shape[1])
            if arr.shape != (len(ids), dim):
                value_error(f"arrays[{name!r}]", f"of shape ({len(ids)}, {dim})", arr.shape)
        columns = dict(columns or {})
        if self.fmt in ("npy", "npz") and columns:
            value_error("columns", "none for a .npy output (one matrix, no other column)",
                        sorted(columns), "Write .parquet or .jsonl.")  # fmt: skip
        if self._columns is None:
            self._columns = list(columns)
        if list(columns) != self._columns:
            value_error("columns", f"the columns of the first part {self._columns}",
                        list(columns))  # fmt: skip
        for name, values in columns.items():
            if len(values) != len(ids):
                value_error(f"columns[{name!r}]", f"{len(ids)} values, one per row", len(values))
        if self.ragged:  # a user's ids as text: compared, written and saved without pickles
            text_ids = ids if isinstance(ids, np.ndarray) else np.asarray(ids, dtype=str)
            self._write_ragged(text_ids, kept[self.strategies[0]], columns)
        elif self.fmt == "npz":
            self._keep_ids(ids)
            self._npz.add(kept[self.strategies[0]])
        elif self.fmt == "npy":
            self._keep_ids(ids)
            arr = kept[self.strategies[0]]
            if self._dtype is None:
                self._dtype = arr.dtype
            self._file.write(arr.astype(self._dtype, copy=False).data)
        elif self.fmt == "jsonl":
            text = jsonl_rows(ids, arrays, self.strategies, columns)
            self._file.write(text.encode("utf-8"))
        else:
            self._write_parquet(ids, arrays, columns)
        self.rows += len(ids)

    def _write_ragged(self, ids: np.ndarray, vectors: np.ndarray, extra: Mapping[str, Any]) -> None:
        """Token rows (``ids`` repeated per token) as one row per text; ``extra``: per-token
        integer columns ``(tokens,)`` or ``(tokens, k)`` (``offsets``), a list per text."""
        for name, values in extra.items():
            if self.fmt == "npz" or not isinstance(values, np.ndarray) or values.dtype.kind != "i":
                value_error(f"columns[{name!r}]", "per-token integers in a .parquet or .jsonl "
                            "ragged output", type(values).__name__)  # fmt: skip
        if not len(ids):
            return
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        text_ids = ids[starts]
        ends = np.r_[starts[1:], len(ids)]
        if self._dtype is None:
            self._dtype = vectors.dtype
        name = self.strategies[0]
        assert self._file is not None
        if self.fmt == "npz":
            assert self._tokens is not None
            self._tokens.write(np.ascontiguousarray(vectors).data)
            self._text_ids.append(text_ids)
            self._offsets.append(ends.astype(np.int64))
        elif self.fmt == "jsonl":
            lists = (vectors if vectors.dtype.kind in "iu" else vectors.astype(np.float32)).tolist()
            more = {n: v.tolist() for n, v in extra.items()}
            lines = [
                json.dumps({"id": i, **{n: v[a:b] for n, v in more.items()}, name: lists[a:b]},
                           separators=(",", ":")) + "\n"
                for i, a, b in zip(text_ids.tolist(), starts.tolist(), ends.tolist(), strict=True)
            ]  # fmt: skip
            self._file.write("".join(lines).encode("utf-8"))
        else:
            import pyarrow as pa

            cuts = np.r_[starts, len(ids)]
            kind = pa.int64() if text_ids.dtype.kind in "iu" else pa.string()
            more = [ragged_array(v.astype(np.int64), cuts) for v in extra.values()]
            self._write_table([pa.array(text_ids, kind), *more, ragged_array(vectors, cuts)],
                              ["id", *extra, name])  # fmt: skip

    def _write_table(self, columns: list[Any], names: list[str]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_arrays(columns, names=names)
        if self.metadata:
            table = table.replace_schema_metadata({"poolkit": json.dumps(self.metadata)})
        if self._parquet is None:
            self._parquet = pq.ParquetWriter(self._file, table.schema)
        self._parquet.write_table(table)

    def _write_ragged_npz(self) -> None:
        """The ragged ``.npz``: ``ids``, ``offsets`` and the flat ``vectors``, copied from the
        temporary file in 16 MiB pieces (fixed timestamps: the same bytes every time)."""
        import io
        import zipfile

        from numpy.lib import format as npy

        assert self._file is not None and self._tokens is not None
        dim = self._dims.get(self.strategies[0], 0)
        # Each part's ends count from the part's first token: make them cumulative.
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for part in self._offsets:
            offsets.append(part + base)
            base += int(part[-1])
        ends = np.concatenate(offsets)
        ids = np.concatenate(self._text_ids) if self._text_ids else np.zeros(0, np.int64)
        with zipfile.ZipFile(self._file, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, arr in (("ids", ids), ("offsets", ends)):
                buf = io.BytesIO()
                npy.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
                z.writestr(zipfile.ZipInfo(f"{name}.npy", (1980, 1, 1, 0, 0, 0)), buf.getvalue())
            info = zipfile.ZipInfo("vectors.npy", (1980, 1, 1, 0, 0, 0))
            with z.open(info, "w", force_zip64=True) as out:
                out.write(_npy_header(self._dtype, (int(ends[-1]), dim)))
                self._tokens.seek(0)
                while piece := self._tokens.read(16 << 20):
                    out.write(piece)
        self._tokens.close()
        self._tokens = None

    def _keep_ids(self, ids: Any) -> None:
        """A .npy has no id column: keep the ids once one differs from its row number."""
        numbers = np.arange(self.rows, self.rows + len(ids), dtype=np.int64)
        if self.ids is None and isinstance(ids, np.ndarray) and np.array_equal(ids, numbers):
            return
        if self.ids is None:
            self.ids = list(range(self.rows))
        self.ids.extend(id_values(ids))

    def _write_parquet(
        self, ids: np.ndarray, arrays: Mapping[str, np.ndarray], extra: Mapping[str, Any]
    ) -> None:
        import pyarrow as pa

        columns = [pa.array(ids, pa.int64() if isinstance(ids, np.ndarray) else pa.string())]
        for values in extra.values():
            if isinstance(values, np.ndarray):
                columns.append(pa.array(values.astype(np.int64), pa.int64()))
            else:
                columns.append(pa.array(list(values), pa.string()))
        names = ["id", *extra]
        for name in self.strategies:
            arr = stored(arrays[name])
            if is_sparse(arr):  # two list columns: term ids and weights
                for column, values in parquet_columns(name, arr):
                    names.append(column)
                    columns.append(values)
                continue
            columns.append(dense_column(arr))
            names.append(name)
        self._write_table(columns, names)

    def close(self) -> Path:
        """Finish the file and rename it to ``path``; returns ``path``."""
        if self._file is None:
            return self.path
        try:
            if self.fmt == "npz" and self.ragged:
                self._write_ragged_npz()
            elif self.fmt == "npy":
                self._write_npy_header()
            elif self.fmt == "npz":
                self._npz.write(self._file)
            elif self.fmt == "parquet" and self.ragged and self._parquet is None:
                import pyarrow as pa

                # No row: the column's width is known only if an empty part gave it.
                dtype = pa.from_numpy_dtype(self._dtype or np.dtype(np.float32))
                empty = pa.large_list(pa.list_(dtype, self._dims.get(self.strategies[0], 0)))
                self._write_table([pa.array([], pa.int64()), pa.array([], empty)],
                                  ["id", self.strategies[0]])  # fmt: skip
                self._parquet.close()
            elif self.fmt == "parquet" and self._parquet is not None:
                self._parquet.close()
            self._file = None
            try:
                self._out.commit(replace=self.overwrite)
            except FileExistsError:
                raise InputError(already_exists(self.path)) from None
        except BaseException:
            self.abort()
            raise
        return self.path

    def _write_npy_header(self) -> None:
        """Write the header over the reserved bytes, now that the row count is known."""
        assert self._file is not None
        header = _npy_header(self._dtype, (self.rows, self._dims.get(self.strategies[0], 0)))
        if len(header) != _NPY_HEADER:
            raise InputError(
                expected=f"a .npy header of {_NPY_HEADER} bytes", got=f"NumPy wrote {len(header)}"
            )
        self._file.seek(0)
        self._file.write(header)
        self._file.seek(0, os.SEEK_END)

    def abort(self) -> None:
        """Drop the temporary file; ``path`` is left as it was."""
        if self._parquet is not None:
            with contextlib.suppress(Exception):
                self._parquet.close()
            self._parquet = None
        if self._npz is not None:
            self._npz.close()
        if self._tokens is not None:
            self._tokens.close()
            self._tokens = None
        self._file = None
        self._out.abort()


def ragged_array(vectors: np.ndarray, offsets: np.ndarray) -> Any:
    """Token rows ``vectors`` ``(total tokens, D)`` as one Parquet list a text:
    ``large_list<fixed_size_list[D]>``, text ``i`` being ``vectors[offsets[i]:offsets[i+1]]``."""
    import pyarrow as pa

    flat = pa.array(vectors.reshape(-1), pa.from_numpy_dtype(vectors.dtype))
    tokens = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), tokens)


def dense_column(vectors: Any) -> Any:
    """``(N, D)`` vectors as one Parquet column, as stored (:func:`stored`):
    ``fixed_size_list<dtype>[D]``."""
    import pyarrow as pa

    arr = stored(np.asarray(vectors))
    flat = pa.array(arr.reshape(-1), pa.from_numpy_dtype(arr.dtype))
    return pa.FixedSizeListArray.from_arrays(flat, arr.shape[1])


def ragged_column(arrays: Sequence[np.ndarray], width: int) -> Any:
    """One ``(tokens, width)`` array a row as one Parquet column (:func:`ragged_array`)."""
    flat = stored(np.concatenate(arrays)) if arrays else np.zeros((0, width), np.float32)
    offsets = np.r_[0, np.cumsum([len(a) for a in arrays])].astype(np.int64)
    return ragged_array(flat, offsets)


def _npy_header(dtype: np.dtype[Any] | None, shape: tuple[int, int]) -> bytes:
    """NumPy's version 1.0 ``.npy`` header for ``shape`` (``dtype`` None: float32), padded
    to a multiple of 64 bytes: any ``(N, D)`` shape takes exactly 128."""
    import io

    from numpy.lib import format as npy

    header = io.BytesIO()
    descr = npy.dtype_to_descr(dtype or np.dtype(np.float32))
    npy.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    return header.getvalue()


def check_kind(path: Path, fmt: str, strategies: list[str], kind: str | None) -> None:
    """Refuse a format that cannot hold ``kind``'s vectors (:attr:`poolkit.Recipe.kind`;
    None: not known yet): ``.npy`` holds dense vectors only; ``.npz`` sparse or multi-vector
    ones; a multi-vector (ragged) output holds one recipe."""
    if fmt == "npy" and kind == "sparse":
        raise InputError(where=path, expected="an output for sparse vectors",
                         got="a .npy file holds dense vectors", fix="Write .npz "
                         "(scipy.sparse.load_npz reads it), .parquet or .jsonl.")  # fmt: skip
    if fmt not in RAGGED_FORMATS and kind == "multivector":
        raise InputError(where=path, expected="an output for a (tokens, dims) array per text",
                         got=f"a .{fmt} file holds one matrix", fix="Write .npz (one flat "
                         "matrix + offsets), .parquet or .jsonl.")  # fmt: skip
    if fmt == "npz" and kind == "dense":
        raise InputError(where=path, expected="an output for dense vectors", got=".npz is for "
                         "sparse recipes (e.g. splade) and multi-vector ones (multivector:tokens)",
                         fix="Write dense vectors as .npy, .parquet or .jsonl.")  # fmt: skip
    if kind == "multivector" and len(strategies) != 1:
        raise InputError(where=path, expected="one recipe in a multi-vector output",
                         got=f"{len(strategies)} were asked for",
                         fix="Run one job per recipe.")  # fmt: skip


def check_output(
    path: str | os.PathLike[str], strategies: list[str], overwrite: bool, kind: str | None = None
) -> str:
    """Validate an output path before any work; returns its format. ``kind``: the recipes'
    (:attr:`poolkit.Recipe.kind`), when known: ``.npy`` takes dense vectors, ``.npz``
    sparse ones."""
    target = Path(path)
    fmt = output_format(target)
    if fmt in ("npy", "npz") and len(strategies) > 1:
        raise InputError(where=target, expected=f"one strategy in a .{fmt} file (one matrix)",
                         got=f"{len(strategies)} were asked for",
                         fix="Write .parquet or .jsonl instead.")  # fmt: skip
    check_kind(target, fmt, strategies, kind)
    if target.exists() and not overwrite:
        raise InputError(already_exists(target))
    parent = target.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(where=target, expected="an output in an existing directory",
                         got=f"{str(parent)!r} {what}", fix="Choose an existing directory.")  # fmt: skip
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(where=target, expected="an output in a writable directory",
                         got=f"{str(parent)!r} is not writable")  # fmt: skip
    return fmt


def open_writer(
    path: str | os.PathLike[str],
    strategies: list[str],
    *,
    overwrite: bool = False,
    metadata: Mapping[str, Any] | None = None,
    kind: str | None = None,
) -> EmbeddingWriter:
    """Start writing ``path`` (format from its extension) with one column per strategy.

    Raises:
        InputError: unknown extension, several strategies for ``.npy``, existing output
            without ``overwrite``, or a missing directory.
    """
    fmt = check_output(path, strategies, overwrite, kind)
    return EmbeddingWriter(Path(path), fmt, list(strategies), overwrite, metadata, kind)
