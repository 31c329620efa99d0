"""Whole-file writes that are never seen half done: a temporary file, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from poolkit.io.diskfull import disk_full, is_disk_full

__all__ = ["atomic_write", "fsync_dir"]


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s directory entries to disk, which makes a rename in it durable.

    Platforms that cannot open a directory are skipped silently.
    """
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(
    path: Path, write: Callable[[IO[bytes]], object], *, size: int | None = None
) -> None:
    """Write ``path`` through ``write(f)`` so that it is either absent, as before, or whole.

    ``write`` gets a binary file in ``path``'s directory; once it returns, the file is
    fsynced, renamed onto ``path`` and the directory fsynced. If ``write`` raises, the
    temporary file is removed, ``path`` is left as it was and the error propagates; a full
    disk (or file size limit) becomes :class:`~poolkit.io.diskfull.DiskFullError` naming
    ``path`` and ``size`` (the file's size when known, else the bytes written before the
    failure, as a lower bound). The new file has mode 0600 (from :func:`tempfile.mkstemp`).
    """
    tmp = None
    written = 0
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            try:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            finally:
                with contextlib.suppress(OSError, ValueError):
                    written = f.tell()
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if is_disk_full(e):
            assert isinstance(e, OSError)
            raise disk_full(e, path, size or written, at_least=size is None) from e
        raise
    fsync_dir(path.parent)
