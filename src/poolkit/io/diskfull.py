"""A write that fails for lack of space becomes one clear error naming the file and the need.

``ENOSPC`` (disk full), ``EDQUOT`` (quota) and ``EFBIG`` (file larger than the filesystem
or the process's ``RLIMIT_FSIZE`` allows) are the same situation for a user: the file
could not be written, and what matters is which file and how much room it needs.
"""

from __future__ import annotations

import errno
import os

from poolkit.errors import PoolkitError

__all__ = ["DiskFullError", "disk_full", "estimate_output_bytes", "is_disk_full", "size_text"]

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EFBIG: "file larger than the filesystem or the process's file size limit allows",
}
if hasattr(errno, "EDQUOT"):
    _REASONS[errno.EDQUOT] = "disk quota exceeded"


class DiskFullError(PoolkitError, OSError):
    """A file could not be written for lack of space; the message names it and the need."""


def is_disk_full(error: BaseException) -> bool:
    """True for an ``OSError`` meaning "no room for this file" (see the module doc)."""
    return isinstance(error, OSError) and error.errno in _REASONS


def size_text(num_bytes: int) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as ``df -H`` prints)."""
    value = float(num_bytes)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def disk_full(
    error: OSError, path: str | os.PathLike[str], needed: int | None, *, at_least: bool = False
) -> DiskFullError:
    """The :class:`DiskFullError` for ``error`` (see :func:`is_disk_full`) writing ``path``.

    ``needed``: the bytes the whole file takes (``at_least``: a lower bound), or None.
    """
    reason = _REASONS.get(error.errno or 0, error.strerror or str(error))
    need = ""
    if needed:
        need = f"; it needs {'at least ' if at_least else ''}{size_text(needed)}"
    message = f"{os.fspath(path)}: cannot write it ({reason}){need}. Free some space"
    if error.errno == errno.EFBIG:
        message += " or raise the file size limit"
    result = DiskFullError(message + ".")
    result.errno = error.errno
    return result


def estimate_output_bytes(fmt: str, rows: int, dims: list[int]) -> int:
    """Size of an embeddings file of ``rows`` rows and these vector widths: exact for
    ``.npy``; estimates for ``.parquet`` (measured 1.56x the raw float32 bytes of unit
    vectors: pyarrow's dictionary pages) and ``.jsonl`` (a float32 printed as a Python
    float takes about 21 characters; measured within 1%)."""
    width = sum(dims)
    if fmt in ("npy", "npz"):  # npz: the flat token matrix, rows = tokens
        return 128 + rows * width * 4
    if fmt == "parquet":
        return 4096 + rows * (8 + width * 4) * 8 // 5
    return rows * (12 + 21 * width + 6 * len(dims))
