"""Whole-file writes that are never seen half done: a temporary file, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from poolkit._errors import already_exists
from poolkit.errors import OutputExistsError
from poolkit.io.diskfull import disk_full, is_disk_full

__all__ = ["AtomicDir", "AtomicFile", "atomic_write", "fsync_dir"]


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


class AtomicFile:
    """A file written under a temporary name beside ``path`` and published whole.

    The one temp-then-rename of the package: :func:`atomic_write`, the streaming
    embedding writers and ``poolkit spans``/``tokens`` output all use it.
    :meth:`commit` flushes, fsyncs, renames onto ``path`` and fsyncs the directory;
    :meth:`abort` removes the temporary file and leaves ``path`` as it was. As a context
    manager it commits on success and aborts on any exception.
    """

    def __init__(self, path: Path, mode: str = "wb") -> None:
        self.path = Path(path)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        self.tmp = Path(tmp)
        self.file: IO[Any] | None = os.fdopen(
            fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})
        )

    def __enter__(self) -> IO[Any]:
        assert self.file is not None
        return self.file

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def commit(self, *, replace: bool = True) -> Path:
        """Publish the file as ``path``; with ``replace=False`` an existing ``path`` is kept
        and :class:`~poolkit.errors.OutputExistsError` (a ``FileExistsError``) raised (the
        temporary file is removed)."""
        if self.file is None:
            return self.path
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
            if not replace and self.path.exists():
                raise OutputExistsError(already_exists(self.path))
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise
        fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        """Drop the temporary file; ``path`` is left as it was."""
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None
        with contextlib.suppress(OSError):
            self.tmp.unlink()


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


class AtomicDir:
    """A folder built under a temporary name beside ``path`` and published whole.

    Fill :attr:`tmp`, then :meth:`commit` renames it onto ``path`` (with ``replace=True``
    an existing ``path`` is first moved aside, then removed once the new one is in place);
    :meth:`abort` removes it. As a context manager it commits on success and aborts on any
    exception, so a failed build leaves nothing behind and ``path`` as it was. A full disk
    while filling it becomes :class:`~poolkit.io.diskfull.DiskFullError` naming ``path``.
    """

    def __init__(self, path: Path, *, replace: bool = False) -> None:
        self.path = Path(path)
        self.replace = replace
        if self.path.exists() and not replace:
            raise OutputExistsError(already_exists(self.path))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> None:
        if exc_type is None:
            self.commit()
            return
        self.abort()
        if exc is not None and is_disk_full(exc):
            assert isinstance(exc, OSError)
            raise disk_full(exc, self.path, None) from exc

    def commit(self) -> Path:
        """Publish the folder as ``path`` (see the class doc)."""
        import shutil

        old = None
        try:
            for f in self.tmp.rglob("*"):
                if f.is_file():
                    with open(f, "rb") as handle:
                        os.fsync(handle.fileno())
            os.chmod(self.tmp, 0o755)  # mkdtemp's 0700 is for the build, not the result
            if self.path.exists():
                if not self.replace:
                    raise OutputExistsError(already_exists(self.path))
                old = self.path.with_name(f".{self.path.name}.old-{os.urandom(4).hex()}")
                os.replace(self.path, old)
            os.replace(self.tmp, self.path)
        except BaseException:
            if old is not None and not self.path.exists():
                os.replace(old, self.path)
                old = None
            self.abort()
            raise
        fsync_dir(self.path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.path

    def abort(self) -> None:
        """Remove the temporary folder; ``path`` is left as it was."""
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)
