"""Notice an input file that changes while a job reads it (appended, truncated, rewritten).

A job reads its input once, over minutes or hours; a file appended to or truncated
meanwhile gives a mix of two versions. Its size, modification time and inode, taken before
the first read, are compared before each part is checkpointed and after the last read: a
difference is reported instead of vectors of a mixed input (parts checkpointed before stay
valid: ``--resume`` checks each part's texts by their SHA-256).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from poolkit.io.readers import InputError

__all__ = ["InputChangedError", "InputStamp"]


class InputChangedError(InputError):
    """The input file changed while it was being read."""


@dataclass(frozen=True)
class InputStamp:
    """Size, modification time and inode of a regular file (None for stdin or a URI)."""

    path: str
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def take(cls, path: str | os.PathLike[str]) -> InputStamp | None:
        """The stamp of ``path`` now, or None when it is not a regular local file."""
        where = os.fspath(path)
        if where == "-" or "://" in where:
            return None
        try:
            st = os.stat(where)
        except OSError:
            return None  # the reader reports a missing file with its own message
        if not os.path.isfile(where):
            return None
        return cls(where, st.st_size, st.st_mtime_ns, st.st_ino)

    def changed(self) -> str | None:
        """What changed since this stamp was taken (one phrase), or None."""
        now = InputStamp.take(self.path)
        if now is None:
            return "it was removed"
        if now.inode != self.inode:
            return "it was replaced by another file"
        if now.size != self.size:
            verb = "grew" if now.size > self.size else "shrank"
            return f"it {verb} from {self.size} to {now.size} bytes"
        if now.mtime_ns != self.mtime_ns:
            return "it was modified at " + time.strftime(
                "%H:%M:%S", time.localtime(now.mtime_ns / 1e9)
            )
        return None

    def check(self, note: str = "") -> None:
        """Raise :class:`InputChangedError` if the file changed since the stamp."""
        what = self.changed()
        if what is not None:
            raise InputChangedError(where=self.path, expected="the input unchanged while it was "
                                    "being read", got=f"{what}; its vectors would mix two "
                                    "versions of the file, so no output was written",
                                    fix=f"Let the file settle, then rerun.{note}")  # fmt: skip
