"""The token-state store: per-text arrays on disk, keyed, sharded, checksummed, bounded.

A :class:`TokenStore` keeps one array per key (a text's token states, ``(n, H)`` or
``(layers, n, H)``) in *shards*: files of many entries written whole under a temporary
name and renamed into place, so a reader never sees half of one. Layout under ``root``::

    states/v1/<namespace>/<shard>.pks     one shard: header (JSON) + payload
    states/v1/<namespace>/about.json      what the namespace holds (for `poolkit cache info`)

A shard is ``MAGIC``, the header's length (8 bytes, little endian), the header (its
payload's XXH3-128 digest, size and dtype, and ``[key, offset, shape, seconds]`` per
entry), then
the payload at a 64-byte boundary, read through a memory map. The digest is checked the
first time a process reads a shard: a damaged or truncated one is removed with one
:class:`~poolkit.io.integrity.IntegrityWarning` and its entries are misses, never read.

The store is bounded: after each write the least recently used shards (by file time,
refreshed on read) of the whole ``states`` folder are removed until it fits ``max_bytes``,
so it never holds more than ``max_bytes`` plus the shard just written. Writes that fail
(full disk, read-only folder) only cost speed: one warning, and the store stops writing.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.io.integrity import IntegrityWarning, fast_digest

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAGIC",
    "StoreUsage",
    "TokenStore",
    "clear_store",
    "parse_size",
    "store_usage",
]

MAGIC = b"PKSTATES1\n"
FORMAT = "v1"
SUFFIX = ".pks"
DEFAULT_MAX_BYTES = 20 * 1024**3  # 20 GiB: SciFact's MiniLM last layer is about 2 GiB
_ALIGN = 64
_OPEN_MAPS = 64  # shards held memory-mapped at once
_STALE_SECONDS = 3600  # a temporary file this old belongs to a writer that died
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str | int, arg: str = "--cache-size") -> int:
    """Bytes in ``text``: an integer, or a number with ``K``, ``M``, ``G`` or ``T`` (powers
    of 1024, an optional ``B`` or ``iB`` after), e.g. ``"500M"``, ``"20G"``, ``"1.5GiB"``."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    raw = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in _UNITS else ""
    number = raw[: len(raw) - len(unit)] if unit else raw
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        value_error(arg, "a size such as 500M, 20G or 1073741824 (bytes)", repr(text))
    return int(value * _UNITS[unit])


def _dir_of(root: Path) -> Path:
    return root / "states" / FORMAT


@dataclass(frozen=True)
class _Where:
    shard: Path
    offset: int  # in elements of the shard's dtype
    shape: tuple[int, ...]
    seconds: float  # the forward pass's time for this entry, as recorded by its writer


class TokenStore:
    """Arrays by key under ``root`` (see the module), one namespace per :meth:`open`.

    ``max_bytes``: the bound on the whole ``states`` folder (``None``: no bound).
    """

    def __init__(self, root: str | os.PathLike[str], max_bytes: int | None = DEFAULT_MAX_BYTES):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._index: dict[str, dict[str, _Where]] = {}  # namespace -> key -> where
        # shard -> its payload, memory-mapped: at most _OPEN_MAPS at once (each holds a file
        # descriptor), the least recently read closed first; a shard's digest is checked once.
        self._maps: OrderedDict[Path, np.ndarray] = OrderedDict()
        self._checked: set[Path] = set()
        # shard -> its header's payload start, size, digest and dtype, read once
        self._heads: dict[Path, dict[str, Any]] = {}
        self._members: dict[Path, tuple[str, list[str]]] = {}  # shard -> namespace, keys
        self._writable = True
        self._estimate: int | None = None  # bytes in the folder, rescanned when over

    # -- namespaces ---------------------------------------------------------------------

    def open(self, namespace: str, about: Mapping[str, Any] | None = None) -> None:
        """Index the shards of ``namespace`` (a file-name-safe string); ``about`` is saved
        once beside them for :func:`store_usage`."""
        if namespace in self._index:
            return
        folder = _dir_of(self.root) / namespace
        self._index[namespace] = {}
        for shard in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else ():
            header = self._header(shard)
            if header is not None:
                self._add(namespace, shard, header)
        if about is not None and not (folder / "about.json").exists():
            self._write(folder / "about.json", json.dumps(dict(about), indent=1).encode())

    def has(self, namespace: str, key: str) -> bool:
        """Whether ``key`` is indexed in ``namespace`` (a later read may still miss)."""
        return key in self._index.get(namespace, {})

    # -- reading ------------------------------------------------------------------------

    def get(self, namespace: str, keys: Sequence[str]) -> list[np.ndarray] | None:
        """The arrays of ``keys`` (read-only views of memory-mapped shards), or None when
        any of them is missing or its shard damaged or gone (those entries are dropped)."""
        index = self._index.get(namespace, {})
        out = []
        for key in keys:
            where = index.get(key)
            payload = None if where is None else self._payload(where.shard)
            if where is None or payload is None:
                if where is not None:
                    self._forget(where.shard)
                return None
            size = int(np.prod(where.shape))
            out.append(payload[where.offset : where.offset + size].reshape(where.shape))
        return out

    def seconds_of(self, namespace: str, key: str) -> float:
        """The seconds recorded with ``key`` (its writer's forward time for it)."""
        return self._index[namespace][key].seconds

    def dtype_of(self, namespace: str, key: str) -> str:
        """The dtype name stored for ``key`` (``"bfloat16"`` for raw bfloat16 bits)."""
        return self._heads[self._index[namespace][key].shard]["dtype"]

    def _payload(self, shard: Path) -> np.ndarray | None:
        if shard in self._maps:
            self._maps.move_to_end(shard)
            return self._maps[shard]
        header = self._heads.get(shard)
        if header is None:  # gone, or damaged
            return None
        try:
            raw = np.memmap(shard, dtype=np.uint8, mode="r")
        except (OSError, ValueError):
            return None
        start = header["_start"]
        body = raw[start : start + header["payload"]]
        if body.size != header["payload"] or (
            shard not in self._checked and fast_digest(memoryview(body)) != header["digest"]
        ):
            self._damaged(shard, "its content does not match the digest written with it")
            return None
        if shard not in self._checked:
            self._checked.add(shard)
            with contextlib.suppress(OSError):
                os.utime(shard)  # least recently used = oldest file time
        dtype = np.uint16 if header["dtype"] == "bfloat16" else np.dtype(header["dtype"])
        self._maps[shard] = body.view(dtype)
        while len(self._maps) > _OPEN_MAPS:
            self._maps.popitem(last=False)
        return self._maps[shard]

    def _header(self, shard: Path) -> dict[str, Any] | None:
        """The parsed header of ``shard`` (``_start``: the payload's byte offset); None for a
        shard gone or damaged (then removed, one warning)."""
        try:
            with open(shard, "rb") as f:
                magic = f.read(len(MAGIC))
                size = int.from_bytes(f.read(8), "little")
                head = f.read(size) if magic == MAGIC and 0 < size < 1 << 31 else b""
        except OSError:
            return None
        try:
            header = json.loads(head)
        except ValueError:
            header = None
        if not (isinstance(header, dict) and isinstance(header.get("entries"), list)
                and {"digest", "payload", "dtype"} <= header.keys()):  # fmt: skip
            self._damaged(shard, "its header cannot be read")
            return None
        header["_start"] = _payload_start(size)
        return header

    def _add(self, namespace: str, shard: Path, header: Mapping[str, Any]) -> None:
        """Index ``shard``'s entries in ``namespace`` and keep what reading it needs."""
        index = self._index.setdefault(namespace, {})
        for key, offset, shape, seconds in header["entries"]:
            index[key] = _Where(shard, int(offset), tuple(shape), float(seconds))
        self._members[shard] = (namespace, [e[0] for e in header["entries"]])
        self._heads[shard] = {k: header[k] for k in ("_start", "payload", "digest", "dtype")}

    def _damaged(self, shard: Path, why: str) -> None:
        warnings.warn(f"{shard}: damaged token-state cache shard ({why}); removed, and its "
                      "texts are encoded again.", IntegrityWarning, stacklevel=4)  # fmt: skip
        with contextlib.suppress(OSError):
            shard.unlink()
        self._forget(shard)

    def _forget(self, shard: Path) -> None:
        self._maps.pop(shard, None)
        self._heads.pop(shard, None)
        namespace, keys = self._members.pop(shard, ("", []))
        index = self._index.get(namespace, {})
        for key in keys:
            if key in index and index[key].shard == shard:
                del index[key]

    # -- writing ------------------------------------------------------------------------

    def put(
        self,
        namespace: str,
        items: Mapping[str, np.ndarray],
        dtype: str | None = None,
        seconds: Sequence[float] | None = None,
    ) -> None:
        """Write ``items`` (key -> array, one dtype) as one shard of ``namespace``, then
        evict down to ``max_bytes``. ``dtype``: the name to record (``"bfloat16"`` for
        arrays holding bfloat16 bits as uint16); default the arrays' own. ``seconds``: the
        time it took to compute each item, kept with it (:meth:`seconds_of`)."""
        if not items or not self._writable:
            return
        arrays = [np.ascontiguousarray(a) for a in items.values()]
        name = dtype or arrays[0].dtype.name
        entries, offset = [], 0
        times = [0.0] * len(arrays) if seconds is None else list(seconds)
        for key, a, t in zip(items, arrays, times, strict=True):
            entries.append([key, offset, list(a.shape), round(float(t), 6)])
            offset += a.size
        payload = b"".join(memoryview(a).cast("B") for a in arrays)
        record = {"digest": fast_digest(payload), "payload": len(payload), "dtype": name,
                  "entries": entries}  # fmt: skip
        header = json.dumps(record).encode()
        start = _payload_start(len(header))
        pad = b"\0" * (start - len(MAGIC) - 8 - len(header))
        folder = _dir_of(self.root) / namespace
        shard = folder / f"{time.time_ns():x}-{os.getpid():x}-{os.urandom(4).hex()}{SUFFIX}"
        data = MAGIC + len(header).to_bytes(8, "little") + header + pad + payload
        if not self._write(shard, data):
            return
        self._add(namespace, shard, {**record, "_start": start})
        if self._estimate is not None:
            self._estimate += len(data)
        self.evict()

    def _write(self, path: Path, data: bytes) -> bool:
        """``data`` as ``path``, whole or not at all (temporary name, rename); False (one
        warning, no more writes) where the folder cannot take it."""
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            return True
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self._writable = False
            warnings.warn(f"{path.parent}: the token-state cache cannot be written ({e}); "
                          "this run goes on without saving states.", IntegrityWarning,
                          stacklevel=4)  # fmt: skip
            return False

    def evict(self, max_bytes: int | None = None) -> int:
        """Remove the least recently used shards until the folder holds at most
        ``max_bytes`` (default the store's); returns the bytes removed. Temporary files
        of writers that died (older than an hour) go too."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        if bound is None:
            return 0
        if self._estimate is not None and self._estimate <= bound:
            return 0
        shards = _shards(self.root)
        total = sum(size for _, size, _ in shards)
        removed = 0
        for _, size, path in sorted(shards):
            if total <= bound:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                self._forget(path)
                total -= size
                removed += size
        _remove_stale(self.root)
        self._estimate = total
        return removed


def _payload_start(header_bytes: int) -> int:
    """The byte offset of a shard's payload: after the magic, the header's length and the
    header, at the next multiple of :data:`_ALIGN`."""
    return -(-(len(MAGIC) + 8 + header_bytes) // _ALIGN) * _ALIGN


def _shards(root: Path) -> list[tuple[float, int, Path]]:
    """``(mtime, size, path)`` of every shard under ``root``'s states folder."""
    out = []
    for shard in _dir_of(root).glob(f"*/*{SUFFIX}"):
        with contextlib.suppress(OSError):
            st = shard.stat()
            out.append((st.st_mtime, st.st_size, shard))
    return out


def _remove_stale(root: Path) -> None:
    cutoff = time.time() - _STALE_SECONDS
    for tmp in _dir_of(root).glob("*/.*.tmp"):
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()


@dataclass(frozen=True)
class StoreUsage:
    """What a cache root's token states hold: per namespace its ``about`` record, shards
    and bytes (``namespaces``), and the totals."""

    root: Path
    shards: int
    bytes: int
    namespaces: list[dict[str, Any]]


def store_usage(root: str | os.PathLike[str]) -> StoreUsage:
    """:class:`StoreUsage` of the token states under ``root``."""
    root = Path(root)
    by_ns: dict[str, list[int]] = {}
    for _, size, shard in _shards(root):
        by_ns.setdefault(shard.parent.name, []).append(size)
    spaces = []
    for ns, sizes in sorted(by_ns.items()):
        about: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            about = json.loads((_dir_of(root) / ns / "about.json").read_text("utf-8"))
        spaces.append({"namespace": ns, "shards": len(sizes), "bytes": sum(sizes), **about})
    return StoreUsage(root, sum(s["shards"] for s in spaces), sum(s["bytes"] for s in spaces),
                      spaces)  # fmt: skip


def clear_store(root: str | os.PathLike[str], namespaces: Iterable[str] | None = None) -> int:
    """Remove the token states under ``root`` (only ``namespaces`` when given); returns the
    bytes removed."""
    import shutil

    base = _dir_of(Path(root))
    removed = 0
    for _, size, shard in _shards(Path(root)):
        if namespaces is None or shard.parent.name in set(namespaces):
            removed += size
    if namespaces is None:
        shutil.rmtree(base, ignore_errors=True)
    else:
        for ns in namespaces:
            shutil.rmtree(base / ns, ignore_errors=True)
    return removed
