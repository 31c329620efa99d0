"""Files and folders that are never seen half done: built under a temporary name, then
fsynced and renamed into place (:func:`publish_file`, :func:`publish_dir`), once for the
package."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from poolkit._errors import already_exists
from poolkit.errors import OutputExistsError
from poolkit.io.diskfull import disk_full, is_disk_full

__all__ = ["AtomicDir", "AtomicFile", "atomic_write", "fsync_dir", "publish_dir", "publish_file"]


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s directory entries to disk, which makes a rename in it durable
    (skipped where a directory cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def publish_file(tmp: Path, path: Path, *, replace: bool = True) -> Path:
    """Publish the finished file ``tmp`` as ``path``: fsync it, rename it onto ``path`` (in
    the same filesystem), fsync the directory. ``replace=False``: an existing ``path`` is
    kept and :class:`~poolkit.errors.OutputExistsError` raised (``tmp`` left to the caller)."""
    _fsync_file(tmp)
    if not replace and path.exists():
        raise OutputExistsError(already_exists(path))
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def remove_path(path: Path) -> None:
    """Remove the file, link or folder ``path`` (a missing one is fine)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def publish_dir(tmp: Path, path: Path, *, replace: bool = False, aside: Path | None = None) -> Path:
    """Publish the finished folder ``tmp`` as ``path``: fsync its files and folders, rename
    it onto ``path``, fsync the parent. An existing ``path`` is refused
    (:class:`~poolkit.errors.OutputExistsError`) unless ``replace``: then it is renamed to
    ``aside`` (default a hidden name beside it), put back if the rename fails, and removed
    once the new folder is in place."""
    for f in sorted(tmp.rglob("*")):
        if f.is_file() and not f.is_symlink():
            _fsync_file(f)
        elif f.is_dir():
            fsync_dir(f)
    fsync_dir(tmp)
    old = None
    if path.exists() or path.is_symlink():
        if not replace:
            raise OutputExistsError(already_exists(path))
        old = aside or path.with_name(f".{path.name}.old-{os.urandom(4).hex()}")
        remove_path(old)
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old is not None and not path.exists():
            os.replace(old, path)
        raise
    fsync_dir(path.parent)
    if old is not None:
        remove_path(old)
    return path


class AtomicFile:
    """A file written under a temporary name beside ``path``: :meth:`commit` publishes it
    whole (:func:`publish_file`), :meth:`abort` removes it and leaves ``path`` as it was; as
    a context manager it commits on success and aborts on any exception."""

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
            self.file.close()
            self.file = None
            publish_file(self.tmp, self.path, replace=replace)
        except BaseException:
            self.abort()
            raise
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
    """Write ``path`` (mode 0600) through ``write(f)`` on an :class:`AtomicFile`: it is
    either as before or whole. A full disk (or file size limit) becomes
    :class:`~poolkit.io.diskfull.DiskFullError` naming ``path`` and ``size`` (when known;
    else the bytes written before the failure, as a lower bound)."""
    out = None
    written = 0
    try:
        out = AtomicFile(path)
        assert out.file is not None
        try:
            write(out.file)
            out.file.flush()
        finally:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                written = out.file.tell()  # type: ignore[union-attr]
        out.commit()
    except BaseException as e:
        if out is not None:
            out.abort()
        if is_disk_full(e):
            assert isinstance(e, OSError)
            raise disk_full(e, path, size or written, at_least=size is None) from e
        raise


class AtomicDir:
    """A folder built in :attr:`tmp`, beside ``path``: :meth:`commit` publishes it whole
    (:func:`publish_dir`), :meth:`abort` removes it; as a context manager it commits on
    success and aborts on any exception (a full disk becomes
    :class:`~poolkit.io.diskfull.DiskFullError` naming ``path``). ``parents``: create
    missing parent folders first."""

    def __init__(self, path: Path, *, replace: bool = False, parents: bool = True) -> None:
        self.path = Path(path)
        self.replace = replace
        if self.path.exists() and not replace:
            raise OutputExistsError(already_exists(self.path))
        if parents:
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
        try:
            os.chmod(self.tmp, 0o755)  # mkdtemp's 0700 is for the build, not the result
            publish_dir(self.tmp, self.path, replace=self.replace)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Remove the temporary folder; ``path`` is left as it was."""
        shutil.rmtree(self.tmp, ignore_errors=True)
