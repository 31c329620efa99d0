"""Checkpoints for long ``poolkit embed`` jobs: parts committed beside the output.

A part is the unit of work of ``poolkit embed --part-size N``: N texts read, embedded and
committed at a time. A job writing ``OUTPUT`` keeps its work in ``OUTPUT.poolkit-work/``:

- ``manifest.json``: the settings the vectors depend on (model files, strategies,
  normalisation, max length, batching, part size, library versions, ...), written once;
- ``chunk-00000000-<sha256>.npz`` ...: one per committed part of texts: row ids, one
  float32 ``(n, D)`` array per strategy, and the SHA-256 of the part's texts (a part of
  ``poolkit embed --chunks`` also stores each row's id, a text's rows not being one per
  text, and its extra columns: ``chunk``, ``start``, ``end``, ``text``). The name
  carries the SHA-256 of the file's own bytes, so part and hash appear in one rename.
- ``lock``: held (``flock``) while a process works on the directory.

Every file appears atomically (temporary file, ``fsync``, ``rename``, ``fsync`` of the
directory), so after a crash or ``kill -9`` a part is either fully there or absent: a
resumed job recomputes at most the part that was in flight. The output is assembled in
the work directory as parts are committed, in order, through the writer an uninterrupted
run uses (from memory: a part committed in this run is never read back; a resumed part is
read back once), and :meth:`Checkpoint.publish` renames it onto ``OUTPUT``: a resumed
job's output is byte-for-byte the one an uninterrupted run writes, and ``OUTPUT`` never
exists half-written.

No part is trusted unverified: reopening a work directory hashes every part before any
new work (a bit-flipped or truncated part is deleted and recomputed, a gap is recomputed,
each with one :class:`~poolkit.io.integrity.IntegrityWarning` naming it; files poolkit did
not write are named and left alone), and a part read back into the output is hashed
again as it is read.

Why the input is identified by content per part, not by size and mtime: a resumed job
re-reads the input anyway to reach its first missing part, so hashing the texts of each
done part costs only that read (disk speed, against hours of model time). The check is
exact: an edit inside the done part is refused (its vectors would be stale), while a copy,
a ``touch`` or a fix *after* the done part (say, the one malformed line that stopped the
job) is accepted, and the output equals a fresh run on the input as it is now.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shutil
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import already_exists, value_error
from poolkit.errors import InputError, OutputExistsError
from poolkit.io.atomic import AtomicDir, atomic_write, fsync_dir, publish_file, remove_path
from poolkit.io.diskfull import disk_full, estimate_output_bytes, is_disk_full
from poolkit.io.integrity import (
    IntegrityWarning,
    bytes_digest,
    file_digest,
    model_files,
    read_verified,
    texts_digest,
)
from poolkit.io.writers import EmbeddingWriter, output_format, row_ids, sidecar_path, stored
from poolkit.sparse.files import is_sparse, part_arrays, part_from

__all__ = [
    "WORK_SUFFIX",
    "Checkpoint",
    "CheckpointError",
    "Part",
    "check_no_work_dir",
    "model_fingerprint",
    "texts_digest",
    "work_dir_for",
]

WORK_SUFFIX = ".poolkit-work"
_MANIFEST = "manifest.json"
_PUBLISHED = "published"
_KIND = "poolkit-checkpoint"
_VERSION = 2  # 2: part file names carry their SHA-256
# A committed part's file: named chunk-... as by older versions (their work dirs resume).
_CHUNK = re.compile(r"^chunk-(\d{8})-([0-9a-f]{64})\.npz$")
_OWN = re.compile(r"^(manifest\.json|lock|published|assembled\.\w+|\..*\.tmp)$")


class CheckpointError(InputError):
    """A work directory cannot be used as asked (exists, locked, or made with other settings)."""


def work_dir_for(output: str | os.PathLike[str]) -> Path:
    """The work directory of ``output``: ``OUTPUT.poolkit-work`` beside it."""
    out = Path(output)
    return out.with_name(out.name + WORK_SUFFIX)


def model_fingerprint(model_dir: str | os.PathLike[str]) -> dict[str, str]:
    """``relative path -> SHA-256`` of every file of a model directory (hidden files skipped).

    Reading the weights once costs about what loading them does, and catches a model
    replaced in place under the same name.
    """
    root = Path(model_dir)
    return {path.relative_to(root).as_posix(): file_digest(path) for path in model_files(root)}


def _lock(path: Path) -> Any:
    """An exclusive, non-blocking ``flock`` on ``path``; released when the process dies."""
    handle = open(path, "a+b")  # held for the Checkpoint's lifetime
    try:
        import fcntl
    except ImportError:  # no flock (Windows): run unlocked
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise CheckpointError(where=path.parent, expected="no other poolkit process on this "
                              "output", got="another one is working on it",
                              fix="Wait for it to finish or stop it first.") from None  # fmt: skip
    return handle


def _describe(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


# Manifest keys shown under another name: ``chunk_size`` is --part-size's value, stored
# under its old name so that work directories of older versions still resume.
_SHOWN_AS = {"chunk_size": "part_size"}


def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two settings dicts (empty when equal)."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        shown = _SHOWN_AS.get(key, key)
        if isinstance(a, dict) and isinstance(b, dict) and key.endswith("files"):
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            diffs.append(f"{shown}: {', '.join(changed[:3])} differ")
        else:
            diffs.append(f"{shown}: {_describe(a)} then, {_describe(b)} now")
    return diffs


def check_no_work_dir(output: str | os.PathLike[str], kind: type[Checkpoint] | None = None) -> None:
    """Raise :class:`CheckpointError` if ``output`` has a work directory (not resuming);
    ``kind`` (default :class:`Checkpoint`) counts the work it holds."""
    path = work_dir_for(output)
    if path.exists():
        raise CheckpointError(where=path, expected="no work directory of an earlier run",
                              got=f"an unfinished one is there ({(kind or Checkpoint)._progress(path)})",
                              fix="Add `resume=True` to continue it, or delete the directory to "
                              "start over.")  # fmt: skip


@dataclass(frozen=True)
class Part:
    """A part as a job's sink takes it (:meth:`Checkpoint.put`): its ``index``, first row
    id and texts' ``digest`` (:func:`texts_digest`); ``arrays`` (None: resumed, done
    already), ``ids``, ``columns`` and ``texts`` as :meth:`Checkpoint.commit` takes them."""

    index: int
    first_row: int
    digest: str
    arrays: Mapping[str, np.ndarray] | None = None
    ids: np.ndarray | None = None
    columns: Mapping[str, Any] | None = None
    texts: int | None = None


class Checkpoint:
    """The work directory (:attr:`path`) of the output :attr:`output`, held (locked) by
    this process: :meth:`open` it, then per part (in order) :meth:`verify` a done one or
    :meth:`commit` a new one (:meth:`put` does either); finally :meth:`publish` writes the
    output and removes the directory, or :meth:`close` keeps it for ``--resume``.
    :attr:`settings`: what the vectors depend on, as the manifest stores them;
    :attr:`done`: the indices of the committed parts."""

    def __init__(self, output: Path, path: Path, settings: dict[str, Any], lock: Any) -> None:
        self.output = output
        self.path = path
        self.settings = settings
        self._lock = lock
        self.done: set[int] = set()
        self._files: dict[int, str] = {}  # part index -> file name
        self._metas: dict[int, dict[str, Any]] = {}  # part index -> its verified meta
        self.foreign: list[str] = []  # files poolkit did not write: named, left alone
        self._damaged: set[int] = set()
        # The output, assembled as parts are committed in order (see _append): the columns,
        # the metadata (a record, or a function of the first stored arrays), the writer
        # (opened at the first row) and how many parts it holds (None: given up).
        self.strategies: list[str] = list(settings.get("strategies") or [])
        self.metadata: Any = None
        self.kind: str | None = None  # the recipes' kind; "multivector": a ragged output
        self._record: Mapping[str, Any] | None = None  # the metadata the output holds
        self._assembly: Any = None
        self._assembled: int | None = 0
        self._scan()
        if self.foreign:
            _warn(
                f"{path}: ignoring {len(self.foreign)} files poolkit did not write "
                f"({_short(self.foreign)}); they are left where they are."
            )

    @classmethod
    def _owned(cls, entry: str) -> bool:
        """Whether ``entry`` of a work directory is a file this kind of checkpoint writes."""
        return bool(_CHUNK.match(entry) or _OWN.match(entry))

    def _scan(self) -> None:
        """Adopt the verified parts of the work directory; collect foreign names."""
        for entry in sorted(os.listdir(self.path)):
            match = _CHUNK.match(entry)
            if match and int(match.group(1)) not in self._files:
                self._adopt(int(match.group(1)), entry)
            elif entry.endswith(".tmp"):
                # Left by a killed process; we hold the lock, so nobody is writing it.
                with contextlib.suppress(OSError):
                    os.unlink(self.path / entry)
            elif not _OWN.match(entry):
                self.foreign.append(entry)
        gaps = sorted(set(range(max(self.done, default=-1))) - self.done - self._damaged)
        if gaps:
            _warn(f"{self.path}: missing parts {_short(gaps)}; they will be recomputed.")

    def _adopt(self, index: int, name: str) -> None:
        """Take part file ``name`` as part ``index`` if its bytes match the hash in its
        name; otherwise delete it (it will be recomputed) with one warning."""
        digest = _CHUNK.match(name).group(2)  # type: ignore[union-attr]
        data = read_verified(self.path / name, digest)
        meta = _parse_meta(data) if data is not None else None
        if meta is None or meta.get("index") != index:
            with contextlib.suppress(OSError):
                os.unlink(self.path / name)
            fsync_dir(self.path)
            self._damaged.add(index)
            _warn(
                f"{self.path / name}: damaged checkpoint part (its content does not match "
                "its recorded SHA-256); deleted, it will be recomputed."
            )
            return
        self.done.add(index)
        self._files[index] = name
        self._metas[index] = meta

    # -- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        output: str | os.PathLike[str],
        settings: Mapping[str, Any],
        *,
        resume: bool,
        strategies: Sequence[str] | None = None,
        metadata: Any = None,
        kind: str | None = None,
    ) -> Checkpoint:
        """Create the work directory of ``output``, or with ``resume=True`` reopen it (a
        missing one is created). ``settings``: JSON values the vectors depend on (a resumed
        job must present equal ones); ``strategies``: the output's vector columns (default:
        ``settings["strategies"]``); ``metadata``: the output's record (:meth:`publish`), or
        a function of the first part's stored arrays giving it; ``kind``: the recipes'
        :attr:`poolkit.Recipe.kind` (``"multivector"``: parts of one row per token, ``ids``
        naming each token's text; the output one row per text).

        Raises:
            CheckpointError: the directory exists and ``resume`` is False; it was made
                with other settings; it is not a poolkit work directory; another process
                holds it; or it cannot be created.
        """
        out = Path(output)
        path = work_dir_for(out)
        settings = json.loads(json.dumps(dict(settings)))  # normalise tuples, keys
        trash = f".{out.name}{WORK_SUFFIX}.trash-"  # left by a kill during discard()
        with contextlib.suppress(OSError):
            for entry in os.listdir(out.parent):
                if entry.startswith(trash):
                    shutil.rmtree(out.parent / entry, ignore_errors=True)
        if path.exists() and not resume:
            check_no_work_dir(out, cls)
        opened = (cls._reopen if path.exists() else cls._create)(out, path, settings)
        if strategies is not None:
            opened.strategies = list(strategies)
        opened.metadata = metadata
        opened.kind = kind
        return opened

    @classmethod
    def _progress(cls, path: Path) -> str:
        """How much finished work the directory at ``path`` holds, for messages."""
        n = count_entries(path, _CHUNK)
        return f"{n} part{'' if n == 1 else 's'} done"

    @classmethod
    def _create(cls, out: Path, path: Path, settings: dict[str, Any]) -> Checkpoint:
        manifest = {"kind": _KIND, "version": _VERSION, "output": out.name, "settings": settings}
        try:
            # Built under a temporary name and renamed, so a work directory always has
            # its manifest.
            staging = AtomicDir(path, parents=False)
        except OutputExistsError:
            raise CheckpointError(where=path, expected="one poolkit process on this output",
                                  got="another one started it at the same time") from None  # fmt: skip
        except OSError as e:
            raise CheckpointError(where=out, expected=f"a work directory {path.name} in "
                                  f"{str(out.parent)!r}", got=f"poolkit cannot create it ({e.strerror})",
                                  fix="Choose a writable output directory.") from None  # fmt: skip
        try:
            atomic_write(
                staging.tmp / _MANIFEST,
                lambda f: f.write(json.dumps(manifest, indent=1, sort_keys=True).encode()),
            )
            lock = _lock(staging.tmp / "lock")
            try:
                staging.commit()
            except OSError:
                lock.close()
                raise CheckpointError(where=path, expected="one poolkit process on this output",
                                      got="another one started it at the same time") from None  # fmt: skip
        finally:
            staging.abort()  # nothing left once committed
        return cls(out, path, settings, lock)

    @classmethod
    def _reopen(cls, out: Path, path: Path, settings: dict[str, Any]) -> Checkpoint:
        try:
            manifest = json.loads((path / _MANIFEST).read_text(encoding="utf-8"))
            if manifest.get("kind") != _KIND:
                raise InputError(manifest.get("kind"))
        except (OSError, ValueError, AttributeError):
            raise CheckpointError(where=path, expected=f"a poolkit work directory (a readable "
                                  f"{_MANIFEST})", got="it is not", fix="Move or delete it.") from None  # fmt: skip
        if manifest.get("version") != _VERSION:
            raise CheckpointError(where=path, expected=f"checkpoint format {_VERSION}",
                                  got=f"it was made by another poolkit version (format "
                                  f"{manifest.get('version')})", fix="Delete it to start over.")  # fmt: skip
        lock = _lock(path / "lock")
        diffs = settings_diff(manifest.get("settings", {}), settings)
        if diffs:
            lock.close()
            raise CheckpointError(where=path, expected="the settings the checkpoint was made with",
                                  got=f"they differ ({'; '.join(diffs)})",
                                  fix="Rerun with the original settings, or delete the directory "
                                  "to start over.")  # fmt: skip
        return cls(out, path, settings, lock)

    # -- parts --------------------------------------------------------------------------

    def put(self, part: Part) -> None:
        """:meth:`verify` a resumed part (no ``arrays``), else :meth:`commit` it."""
        if part.arrays is None:
            self.verify(part.index, part.first_row, part.digest)
        else:
            self.commit(part.index, part.first_row, part.digest, part.arrays, ids=part.ids,
                        columns=part.columns, texts=part.texts)  # fmt: skip

    def commit(
        self,
        index: int,
        first_row: int,
        digest: str,
        arrays: Mapping[str, np.ndarray],
        *,
        ids: np.ndarray | None = None,
        columns: Mapping[str, Any] | None = None,
        texts: int | None = None,
    ) -> None:
        """Store part ``index`` (0-based) atomically: ``first_row`` is its first text's row
        id, ``digest`` its texts' :func:`texts_digest`, ``arrays`` strategy -> ``(n, D)`` in
        input order, ``ids`` each row's id (default ``first_row`` onwards), ``columns`` the
        writer's extra columns (name -> ``n`` ints or strings), ``texts`` how many texts it
        holds (default: its row count)."""
        names = list(arrays)
        rows = {int(np.shape(a)[0]) for a in arrays.values()}
        extra = dict(columns or {})
        rows |= {len(v) for v in extra.values()} | (set() if ids is None else {len(ids)})
        if len(rows) != 1:
            value_error("arrays", "of one row count", f"row counts {sorted(rows)}")
        meta: dict[str, Any] = {"index": index, "first_row": first_row, "rows": rows.pop(),
                                "texts_sha256": digest, "strategies": names}  # fmt: skip
        # Stored forms (float16, int8, uint8) are kept as they are; anything else is float32.
        kept = {n: stored(arrays[n]) for n in names}  # also what the output gets from memory
        payload = {}
        for k, n in enumerate(names):  # a sparse column as its CSR arrays
            payload.update(
                part_arrays(f"s{k}", kept[n]) if is_sparse(kept[n]) else {f"s{k}": kept[n]}
            )
        if ids is not None:  # parts of one row per text keep their files as they were
            meta["texts"] = meta["rows"] if texts is None else int(texts)
            payload.update(_column_payload("ids", row_ids(ids)))  # a user's ids: strings too
        if extra:
            meta["columns"] = list(extra)
            for k, values in enumerate(extra.values()):
                payload.update(_column_payload(f"c{k}", values))
        buffer = io.BytesIO()  # serialised first: the file name carries its hash
        np.savez(buffer, meta=np.array(json.dumps(meta)), **payload)
        data = buffer.getbuffer()
        name = f"chunk-{index:08d}-{bytes_digest(data)}.npz"  # the old name: see _CHUNK
        atomic_write(self.path / name, lambda f: f.write(data), size=len(data))
        old = self._files.get(index)
        if old is not None and old != name:
            with contextlib.suppress(OSError):
                os.unlink(self.path / old)
        self.done.add(index)
        self._files[index] = name
        self._metas[index] = meta
        if self._assembled is not None and index < self._assembled:
            self._close_assembly()  # a part replaced: the output is rebuilt from the files
        start = self._assembled  # part `index` goes on from memory, after any resumed ones
        if start is not None and self.done.issuperset(range(start, index)):
            first = np.arange(first_row, first_row + meta["rows"], dtype=np.int64)
            try:
                self._assemble(index, (first if ids is None else ids, kept, extra))
            except BaseException as e:
                self._close_assembly()  # never half a part: the next one starts it again
                if not is_disk_full(e):
                    raise
                self._assembled = None  # publish starts it again, and says what it needs

    def _assemble(self, stop: int, last: tuple[Any, Any, Any] | None = None) -> None:
        """Append parts ``_assembled .. stop-1`` to the output under assembly, read back
        from their files (parts a resume found done), then ``last`` (part ``stop``'s ids,
        arrays and columns, from memory): a part committed in order is never read back."""
        for k in range(self._assembled or 0, stop):
            if self.rows(k):  # a part whose texts gave no row (--chunks): nothing
                self._append(*self.load_part(k))
            self._assembled = k + 1
        if last is not None:
            self._append(*last)
            self._assembled = stop + 1

    def _append(self, ids: np.ndarray, arrays: Mapping[str, Any], columns: Any) -> None:
        """Write rows into the output under assembly, opened at the first row (a part of
        --chunks may have none): :attr:`metadata` may need the stored arrays."""
        if not len(ids) and arrays:  # a part whose texts gave no row (--chunks): nothing
            return
        if self._assembly is None:
            fmt = output_format(self.output)
            meta = self.metadata
            self._record = (meta(arrays) if arrays else None) if callable(meta) else meta
            self._assembly = EmbeddingWriter(self.path / f"assembled.{fmt}", fmt,
                                             self.strategies, True, self._record,
                                             self.kind)  # fmt: skip
        if len(ids):
            self._assembly.write(ids, arrays, columns)

    def _close_assembly(self) -> None:
        """Drop the output under assembly (its temporary file goes): the next commit or
        :meth:`publish` starts it again from the parts' files."""
        self._assembled = 0
        if self._assembly is not None:
            self._assembly.abort()
            self._assembly = None

    def _read(self, index: int) -> bytes:
        """The verified bytes of part ``index``; a part damaged since it was checked is
        deleted (so that ``--resume`` recomputes it) and reported."""
        path = self.path / self._files[index]
        data = read_verified(path, _CHUNK.match(path.name).group(2))  # type: ignore[union-attr]
        if data is None:
            with contextlib.suppress(OSError):
                os.unlink(path)
            self.done.discard(index)
            raise CheckpointError(where=path, expected="a checkpoint part matching its SHA-256",
                                  got="it was damaged after it was written (deleted)",
                                  fix="Rerun with `resume=True` to recompute it.")  # fmt: skip
        return data

    def verify(self, index: int, first_row: int, digest: str) -> None:
        """Check that done part ``index`` was made from these texts.

        Raises:
            CheckpointError: the input changed inside the part already embedded.
        """
        meta = self._metas[index]
        if meta["first_row"] != first_row or meta["texts_sha256"] != digest:
            last = first_row + meta.get("texts", meta["rows"]) - 1
            raise CheckpointError(where=self.path, expected="the input of the part already embedded",
                                  got=f"texts {first_row}..{last} differ from the checkpoint",
                                  fix="Restore the original input, or delete the work directory "
                                  "to start over.")  # fmt: skip

    def load_part(self, index: int) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
        """Part ``index``: row ids ``(n,)`` int64, strategy -> ``(n, D)`` as stored, and its
        extra columns (name -> int64 array or list of strings; empty for a part committed
        without)."""
        meta = self._metas[index]
        with np.load(io.BytesIO(self._read(index)), allow_pickle=False) as z:
            arrays = {}
            for k, n in enumerate(meta["strategies"]):  # dense, or a sparse column's CSR
                sparse = part_from(z, f"s{k}")
                arrays[n] = z[f"s{k}"] if sparse is None else sparse
            columns = {n: _column_from(z, f"c{k}") for k, n in enumerate(meta.get("columns", []))}
            ids = _column_from(z, "ids") if {"ids", "ids_utf8"} & set(z.files) else None
        if ids is None:
            start = int(meta["first_row"])
            ids = np.arange(start, start + int(meta["rows"]), dtype=np.int64)
        return ids, arrays, columns

    def rows(self, index: int) -> int:
        """How many rows committed part ``index`` holds."""
        return int(self._metas[index]["rows"])

    # -- the end ------------------------------------------------------------------------

    def publish(self, num_parts: int, *, overwrite: bool) -> Path:
        """Write parts ``0..num_parts-1`` into ``output`` (atomic; parts not assembled yet
        are read back and hashed again), remove the work directory, return ``output``.
        :attr:`metadata` goes into a Parquet output's metadata, else into the JSON file
        :func:`poolkit.io.writers.sidecar_path` names, published first.

        Raises:
            CheckpointError: a part is missing, or ``output`` exists and not ``overwrite``.
        """
        missing = [k for k in range(num_parts) if k not in self.done]
        if missing:
            raise CheckpointError(where=self.path, expected="every part",
                                  got=f"parts {missing[:5]} are missing")  # fmt: skip
        fmt = output_format(self.output)
        if (self._assembled or 0) > num_parts:
            self._close_assembly()
        # Assembled inside the work directory (same filesystem as OUTPUT, so the final
        # rename is atomic); a kill here leaves only work-directory files behind.
        try:
            self._assemble(num_parts)
            if self._assembly is None:  # no row at all: an empty output
                self._append(np.zeros(0, np.int64), {}, None)
            ids = self._assembly.ids  # a .npy's ids, when not its row numbers
            staged = self._assembly.close()
            self._assembly = None
        except BaseException as e:
            self._close_assembly()
            if not is_disk_full(e):
                raise
            rows = sum(self.rows(k) for k in range(num_parts))
            first = next((k for k in range(num_parts) if self.rows(k)), 0)
            arrays = self.load_part(first)[1]
            dims = [int(arrays[n].shape[1]) for n in self.strategies]
            raise disk_full(e, self.output, estimate_output_bytes(fmt, rows, dims)) from e
        # mkstemp files are private (0600); OUTPUT gets the mode any new file would get.
        umask = os.umask(0)
        os.umask(umask)
        try:
            os.chmod(staged, 0o666 & ~umask)
            self._mark_published(overwrite, "vectors")
            if fmt != "parquet":
                if metadata := self._record:
                    if ids is not None:  # a .npy has no id column: its record keeps them
                        metadata = {**metadata, "ids": ids}
                    side = json.dumps(metadata, indent=1).encode("utf-8")
                    atomic_write(sidecar_path(self.output), lambda f: f.write(side))
                elif overwrite:  # a replaced output's record would describe other vectors
                    sidecar_path(self.output).unlink(missing_ok=True)
            publish_file(staged, self.output)
        except BaseException:
            staged.unlink(missing_ok=True)  # a full copy of OUTPUT: do not keep it around
            self._assembled = 0  # a second publish assembles it again, from the parts
            raise
        self.discard()
        return self.output

    def _mark_published(self, overwrite: bool, finished: str) -> None:
        """Refuse an existing output unless ``overwrite``; else mark the directory as
        renaming onto it (see :meth:`finished`)."""
        if self.output.exists() and not overwrite:
            raise CheckpointError(
                already_exists(
                    self.output,
                    f"the finished {finished} stay in {self.path.name} for `resume=True`",
                )
            )
        atomic_write(self.path / _PUBLISHED, lambda f: f.write(b"renaming onto the output\n"))

    def discard(self) -> None:
        """Remove the work directory (renamed away first, so a kill mid-removal leaves no
        half-deleted checkpoint under the work directory's name)."""
        self._close_assembly()
        trash = self.path.with_name(
            f".{self.output.name}{WORK_SUFFIX}.trash-{os.getpid()}-{os.urandom(4).hex()}"
        )
        if any(not self._owned(e) for e in os.listdir(self.path)):
            self.close()
            self.remove(self.output)
            return
        os.rename(self.path, trash)
        fsync_dir(self.path.parent)
        self.close()
        shutil.rmtree(trash, ignore_errors=True)

    @classmethod
    def remove(cls, output: str | os.PathLike[str]) -> None:
        """Remove ``output``'s work directory but keep files poolkit did not write: then the
        directory stays with only those, and one warning names them. The ``published``
        marker goes last, so a kill midway leaves a directory still recognised as done."""
        path = work_dir_for(output)
        last = ("lock", _MANIFEST, _PUBLISHED)  # parts first: a kill leaves a usable dir
        entries = sorted(os.listdir(path), key=lambda e: last.index(e) if e in last else -1)
        foreign = [e for e in entries if not cls._owned(e)]
        for entry in entries:
            if entry not in foreign:
                with contextlib.suppress(OSError):
                    remove_path(path / entry)
        if not foreign:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return
        _warn(
            f"{path}: kept, it holds {len(foreign)} files poolkit did not write "
            f"({_short(foreign)}); move them and delete the directory."
        )

    _STAGED_GLOB = "assembled.*"  # what is renamed onto the output, in the work directory

    @classmethod
    def finished(cls, output: str | os.PathLike[str]) -> bool:
        """True when ``output``'s work directory belongs to a job whose output was already
        published (killed after the final rename, before the directory was removed)."""
        path = work_dir_for(output)
        return (path / _PUBLISHED).exists() and not any(path.glob(cls._STAGED_GLOB))

    def close(self) -> None:
        """Release the lock; the directory stays for ``--resume`` (without the output under
        assembly: it is rebuilt from the parts)."""
        self._close_assembly()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def _column_payload(key: str, values: Any) -> dict[str, np.ndarray]:
    """An extra column as npz arrays: ints as ``key`` (int64); strings as their UTF-8
    bytes ``key + "_utf8"`` and the ``n + 1`` byte offsets ``key + "_at"`` (no pickles,
    and no fixed-width padding to the longest string)."""
    if isinstance(values, np.ndarray):
        return {key: values.astype(np.int64)}
    data = [str(v).encode("utf-8", "surrogatepass") for v in values]
    at = np.zeros(len(data) + 1, np.int64)
    at[1:] = np.cumsum([len(b) for b in data], dtype=np.int64)
    return {f"{key}_utf8": np.frombuffer(b"".join(data), np.uint8), f"{key}_at": at}


def _column_from(z: Any, key: str) -> Any:
    if key in z.files:
        return z[key]
    data, at = z[f"{key}_utf8"].tobytes(), z[f"{key}_at"].tolist()
    return [data[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(at)]


def count_entries(path: Path, pattern: re.Pattern[str]) -> int:
    """How many entries of the directory ``path`` match ``pattern`` (0: unreadable)."""
    with contextlib.suppress(OSError):
        return sum(1 for e in os.listdir(path) if pattern.match(e))
    return 0


def _parse_meta(data: bytes) -> dict[str, Any] | None:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
    except Exception:  # any damage the hash did not catch: not a usable part
        return None
    return meta if isinstance(meta, dict) else None


def _short(items: Sequence[Any], limit: int = 5) -> str:
    head = ", ".join(str(x) for x in items[:limit])
    return head if len(items) <= limit else f"{head}, ... ({len(items) - limit} more)"


def _warn(message: str) -> None:
    warnings.warn(message, IntegrityWarning, stacklevel=3)
