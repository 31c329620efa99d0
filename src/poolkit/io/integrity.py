"""Content hashes of files poolkit writes and later trusts (checkpoint parts, ONNX cache).

A file is trusted only when its bytes hash to the value recorded when it was written.
Checkpoint parts and shards use SHA-256 (their names are their hashes; the cost is small
next to embedding them). The ONNX cache is hashed on every model load, where SHA-256 cost
a quarter of the load (51 ms for a 90 MB model on the project's CPU): it uses XXH3-128
(4 ms), which catches any accidental corruption just as well; nothing here defends against
an attacker who can write to the cache folder.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "IntegrityWarning",
    "bytes_digest",
    "fast_digest",
    "fast_file_digest",
    "file_digest",
    "model_files",
    "read_verified",
    "texts_digest",
]


class IntegrityWarning(UserWarning):
    """A stored file did not match its recorded hash and is being rebuilt or recomputed."""


def bytes_digest(data: bytes | bytearray | memoryview) -> str:
    """SHA-256 (hex) of ``data``."""
    return hashlib.sha256(data).hexdigest()


def fast_digest(data: bytes | bytearray | memoryview) -> str:
    """XXH3-128 of ``data``, written ``xxh3_128:<hex>`` so a record says which hash it holds."""
    import xxhash

    return "xxh3_128:" + xxhash.xxh3_128(data).hexdigest()


def short_digest(digest: str) -> str:
    """The first 12 hex digits of a ``name:hex`` digest (:func:`fast_digest`), for messages
    and file names."""
    return digest.rpartition(":")[2][:12]


def fast_file_digest(path: str | os.PathLike[str]) -> str:
    """:func:`fast_digest` of the file at ``path``, hashed through a memory map (no copy)."""
    import mmap

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return fast_digest(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return fast_digest(view)


def texts_digest(texts: Sequence[str]) -> str:
    """SHA-256 (hex) of a list of texts; each is length-prefixed, so boundaries count."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


def model_files(model_dir: str | os.PathLike[str]) -> list[Path]:
    """Every file of a model directory, its subfolders' included and hidden ones (a name
    starting with ``.``, or under such a folder) left out, sorted by path."""
    root = Path(model_dir)
    return [path for path in sorted(root.rglob("*")) if path.is_file()
            and not any(part.startswith(".") for part in path.relative_to(root).parts)]  # fmt: skip


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of the file at ``path``, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_verified(path: Path, digest: str) -> bytes | None:
    """The bytes of ``path`` if they hash to ``digest`` (SHA-256; a hex prefix is enough),
    else None.

    Reading once and parsing the same bytes afterwards means what was checked is what is
    used, even if the file changes later.
    """
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if digest and bytes_digest(data).startswith(digest) else None
