"""What ``--engine ray --resume`` needs from Ray: input files' content hashes, computed in
parallel where the files are, and a block of results cut at input-file boundaries."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from poolkit.ray import require_ray

__all__ = ["file_stamp", "file_stamps", "split_by_file"]


def file_stamp(file: Any) -> dict[str, Any]:
    """``size``, ``mtime_ns`` and ``sha256`` (hex) of one input file (a
    :class:`poolkit.ray.Corpus` file: ``file.path`` is a local path or a URI)."""
    import pyarrow.fs as pafs

    if "://" in file.path:
        fs, path = pafs.FileSystem.from_uri(file.path)
    else:
        fs, path = pafs.LocalFileSystem(), file.path
    info = fs.get_file_info(path)
    h = hashlib.sha256()
    with fs.open_input_stream(path) as stream:
        while block := stream.read(1 << 20):
            h.update(block)
    return {"size": info.size, "mtime_ns": info.mtime_ns, "sha256": h.hexdigest()}


def file_stamps(files: Sequence[Any]) -> list[dict[str, Any]]:
    """:func:`file_stamp` of every file, in parallel Ray tasks asking for zero CPUs."""
    ray = require_ray()
    task = ray.remote(num_cpus=0, max_retries=3)(file_stamp)
    return list(ray.get([task.remote(f) for f in files]))


def split_by_file(table: Any, offsets: Sequence[int]) -> Iterator[tuple[int, int, Any]]:
    """``(file index, first id, rows)`` for each input file's rows in ``table`` (a
    ``pyarrow.Table`` with an ``id`` column), rows sorted by id; ``offsets[k]`` is the
    first id of file ``k`` (empty files share their successor's offset)."""
    if table.num_rows == 0:
        return
    ids = table.column("id").to_numpy()
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(order, np.arange(len(ids))):
        table, ids = table.take(order), ids[order]
    files = np.searchsorted(np.asarray(offsets), ids, side="right") - 1
    cuts = np.flatnonzero(np.diff(files)) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ids)], strict=True):
        yield int(files[lo]), int(ids[lo]), table.slice(lo, hi - lo)
