"""Whole-file writes that are never seen half done: a temporary file, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

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


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write(f)`` so that it is either absent, as before, or whole.

    ``write`` gets a binary file in ``path``'s directory; once it returns, the file is
    fsynced, renamed onto ``path`` and the directory fsynced. If ``write`` raises, the
    temporary file is removed, ``path`` is left as it was and the error propagates.
    The new file has mode 0600 (from :func:`tempfile.mkstemp`).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
