"""Checkpoints for ``poolkit embed INPUT -o OUTPUT_DIR --engine ray``: a killed driver
loses at most the input files it had not finished.

The job keeps its work in ``OUTPUT_DIR.poolkit-work/``, the work directory of the local
engine (:class:`~poolkit.io.checkpoint.Checkpoint`: same manifest, settings check and lock):

- ``part-<sha256>.parquet``: one shard per block of rows of one input file (``id``,
  ``text_id``, one column per strategy), written as its vectors arrive; the name carries
  the SHA-256 of the file's bytes, so shard and hash appear in one rename;
- ``file-<sha256>.json``: a record written (atomically, name = SHA-256 of its bytes) once
  every row of an input file is in shards: the file's name, first row id, row count,
  size, modification time and SHA-256, the digest of the ids its rows carry
  (``--id-column``; None for row numbers), and its shards in row order.

A resumed job skips an input file only when a record matches it (same name, first row id,
row count, content hash and ids: an edited file, or one whose ids moved because an earlier
file changed, is embedded again) and every shard the record names still hashes to its name; a
damaged shard sends its file back to be embedded, with one warning naming it. Shards no
record names (the blocks of a file in flight when the driver died) are deleted with one
warning; files poolkit did not write are named and left alone. The output folder appears
whole (:meth:`ShardCheckpoint.publish`), with the shards an uninterrupted run writes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from poolkit._errors import count
from poolkit.io.atomic import atomic_write, fsync_dir, publish_dir, remove_path
from poolkit.io.checkpoint import (
    _OWN,
    WORK_SUFFIX,
    Checkpoint,
    CheckpointError,
    _short,
    _warn,
    count_entries,
)
from poolkit.io.integrity import bytes_digest, read_verified

__all__ = ["ShardCheckpoint"]

_SHARD = re.compile(r"^part-([0-9a-f]{64})\.parquet$")
_RECORD = re.compile(r"^file-([0-9a-f]{64})\.json$")
_STAGED = "staged"
# What a record must hold to vouch for an input file (besides its shards).
_IDENTITY = ("name", "first_id", "rows", "sha256")
# ... and must match: also the digest of the ids the rows carry (None: row numbers).
_MATCH = (*_IDENTITY, "ids")


class ShardCheckpoint(Checkpoint):
    """The work directory of a Ray job's output folder, held (locked) by this process:
    :meth:`open` it (inherited), :meth:`keep` once with the input files as they are now,
    :meth:`put` each block (shards, and a record per finished file), then :meth:`stage`
    and :meth:`publish`; :meth:`close` keeps it for ``--resume``. :attr:`done_files`:
    input file name -> its verified record, for the files done."""

    _STAGED_GLOB = _STAGED  # finished(): published, and the staged folder renamed away

    def _scan(self) -> None:
        self.done_files: dict[str, dict[str, Any]] = {}
        self._records: list[tuple[str, dict[str, Any]]] = []  # (file name, record)
        self._shards: set[str] = set()
        damaged = []
        for entry in sorted(os.listdir(self.path)):
            record = _RECORD.match(entry)
            if _SHARD.match(entry):
                self._shards.add(entry)
            elif record:
                data = read_verified(self.path / entry, record.group(1))
                parsed = _parse_record(data) if data is not None else None
                if parsed is None:
                    self._unlink(entry)
                    damaged.append(entry)
                else:
                    self._records.append((entry, parsed))
            elif entry.endswith(".tmp") or entry == _STAGED:
                # Left by a killed process; we hold the lock, so nobody is writing it.
                self._unlink(entry)
            elif not self._owned(entry):
                self.foreign.append(entry)
        if damaged:
            _warn(
                f"{self.path}: damaged file records {_short(damaged)} (content does not "
                "match the recorded SHA-256); deleted, their files will be embedded again."
            )

    @classmethod
    def _owned(cls, entry: str) -> bool:
        return bool(_SHARD.match(entry) or _RECORD.match(entry) or _OWN.match(entry)) or (
            entry == _STAGED
        )

    @classmethod
    def _progress(cls, path: Path) -> str:
        return f"{count(count_entries(path, _RECORD), 'input file')} done"

    def records_on_disk(self) -> int:
        """Finished-file records in the directory now: also one whose write an interrupt
        cut short after its rename (so it counts, though :attr:`done_files` missed it)."""
        return count_entries(self.path, _RECORD)

    def _unlink(self, entry: str) -> None:
        with contextlib.suppress(OSError):
            remove_path(self.path / entry)

    # -- resuming -----------------------------------------------------------------------

    def keep(
        self, stamps: Sequence[Mapping[str, Any]], unchanged: Sequence[Any] = ()
    ) -> list[bool]:
        """Which input files are done (see the module doc; an empty file is recorded done
        here): ``stamps[k]`` (``name``, ``first_id``, ``rows``, ``sha256``, ...) describes
        input file ``k`` as it is now; ``unchanged[k]`` (optional), its
        :class:`~poolkit.io.inputstamp.InputStamp`, checked before :meth:`put` records it."""
        self._stamps, self._unchanged = list(stamps), list(unchanged)
        self._pending: dict[int, list[tuple[int, int, str]]] = {}
        wanted = {tuple(s.get(k) for k in _MATCH): s for s in stamps}
        used: set[str] = set()
        damaged: list[str] = []
        changed: list[str] = []
        current = {s["name"] for s in stamps}
        for entry, record in self._records:
            key = tuple(record.get(k) for k in _MATCH)
            if key not in wanted or record["name"] in self.done_files:
                if record.get("name") in current and record.get("name") not in self.done_files:
                    changed.append(str(record["name"]))
                self._unlink(entry)
                continue
            bad = [s for s in record["shards"] if not self._verified(s)]
            if bad:
                damaged.extend(bad)
                for shard in bad:
                    self._unlink(shard)
                self._unlink(entry)
                continue
            self.done_files[record["name"]] = record
            used.update(record["shards"])
        partial = sorted(self._shards - used - set(damaged))
        for shard in partial:
            self._unlink(shard)
        self._shards = used
        fsync_dir(self.path)
        if damaged:
            _warn(
                f"{self.path}: damaged shards {_short(damaged)} (content does not match "
                "their SHA-256); deleted, their input files will be embedded again."
            )
        if changed:
            _warn(
                f"{self.path}: input files {_short(changed)} changed since their shards "
                "were written (content, row count, first row id or own ids); embedding them again."
            )
        if partial:
            _warn(
                f"{self.path}: removed {len(partial)} shards that belong to no finished input "
                f"file ({_short(partial, 3)}); their rows will be embedded again."
            )
        for stamp in stamps:
            if stamp["rows"] == 0 and stamp["name"] not in self.done_files:
                self.finish(stamp, [])  # nothing to embed
        return [s["name"] in self.done_files for s in stamps]

    def put(self, block: tuple[int, int, Any]) -> None:
        """Write a block of input file ``k``'s rows, ``(k, first id, pyarrow.Table)`` as
        :func:`~poolkit.cli._ray_resume.split_by_file` cuts them, as a shard; once every
        row of file ``k`` is in, record it done (:meth:`finish`), shards in row order.
        Rows are counted by distinct ``id``: with ``--chunks`` a row of the file gives one
        table row per chunk, each with the row's id."""
        k, first, table = block
        pending = self._pending.setdefault(k, [])
        rows = len(table.column("id").unique())
        pending.append((first, rows, self.add_shard(table)))
        if sum(n for _, n, _ in pending) == self._stamps[k]["rows"]:
            if k < len(self._unchanged) and self._unchanged[k] is not None:
                self._unchanged[k].check()
            self.finish(self._stamps[k], [name for *_, name in sorted(self._pending.pop(k))])

    def _verified(self, shard: str) -> bool:
        match = _SHARD.match(shard)
        return bool(match) and read_verified(self.path / shard, match.group(1)) is not None  # type: ignore[union-attr]

    # -- writing ------------------------------------------------------------------------

    def add_shard(self, table: Any) -> str:
        """Write a ``pyarrow.Table`` as a shard (atomic); returns its file name."""
        import pyarrow.parquet as pq

        buffer = io.BytesIO()  # serialised first: the file name carries its hash
        pq.write_table(table, buffer)
        data = buffer.getbuffer()
        name = f"part-{bytes_digest(data)}.parquet"
        atomic_write(self.path / name, lambda f: f.write(data), size=len(data))
        self._shards.add(name)
        return name

    def finish(self, stamp: Mapping[str, Any], shards: Sequence[str]) -> None:
        """Record input file ``stamp`` (as given to :meth:`keep`) as done, its rows being
        in ``shards`` (row order)."""
        record = {**stamp, "shards": list(shards)}
        data = json.dumps(record, indent=1, sort_keys=True).encode()
        name = f"file-{bytes_digest(data)}.json"
        atomic_write(self.path / name, lambda f: f.write(data), size=len(data))
        self.done_files[str(stamp["name"])] = record

    # -- the end ------------------------------------------------------------------------

    def stage(self, names: Sequence[str]) -> Path:
        """Link every finished file's shards, files in the order of ``names``, as
        ``staged/part-00000.parquet`` ...; returns the ``staged`` folder."""
        missing = [n for n in names if n not in self.done_files]
        if missing:
            raise CheckpointError(where=self.path, expected="every input file done",
                                  got=f"{_short(missing)} are not")  # fmt: skip
        staged = self.path / _STAGED
        self._unlink(_STAGED)
        staged.mkdir()
        shards = [s for n in names for s in self.done_files[n]["shards"]]
        for k, shard in enumerate(shards):
            source, target = self.path / shard, staged / f"part-{k:05d}.parquet"
            try:
                os.link(source, target)
            except OSError:  # no hard links here: a copy
                shutil.copyfile(source, target)
        fsync_dir(staged)
        return staged

    def publish(self, *, overwrite: bool) -> Path:  # type: ignore[override]
        """Rename ``staged/`` onto the output folder (an existing one only with
        ``overwrite``), then remove the work directory. Returns the output folder."""
        self._mark_published(overwrite, "shards")
        # An old OUTPUT waits under a trash name that Checkpoint.open clears after a crash.
        old = self.output.with_name(f".{self.output.name}{WORK_SUFFIX}.trash-old")
        publish_dir(self.path / _STAGED, self.output, replace=True, aside=old)
        self.discard()
        return self.output


def _parse_record(data: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("shards"), list):
        return None
    return record if all(k in record for k in _IDENTITY) else None
