"""The encoder's forward pass through a :class:`~poolkit.token_store.TokenStore`.

Attached to an :class:`~poolkit.encoder.Encoder` (``encoder.state_cache``), a
:class:`StateCache` answers each planned batch from the store where every row is there,
and encodes only the rows that are not (then stores them). A row is keyed by the token ids
fed to the model (prompt, template and truncation included, so the text, the prompt and
the route are in it); its namespace by everything else that shapes the states: the
model's files (their content, not the name), the backend, device, dtypes, the library
versions, the max length, the long-text policy and window stride, and the layers kept.
Any change is a miss.

Exact by default: states are stored as the backend gave them; the encoder batches as it
would without a cache, reads a batch only where every row of it is stored, and encodes the
others whole (their stored rows again, not written twice), so every number equals an
uncached run's bit for bit. A batch read back is padded as the forward pass padded it
(zeros there, which pooling masks). A run that stops part way (killed, or its shards
evicted) stored whole batches, so the next run reads those and encodes the rest.
``dtype="float16"`` halves the space and is not exact.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.token_store import DEFAULT_MAX_BYTES, TokenStore, parse_size

__all__ = [
    "CACHE_DTYPES",
    "CACHE_LAYERS",
    "CacheCounts",
    "StateCache",
    "model_digest",
    "open_state_cache",
    "row_key",
]

CACHE_LAYERS = ("used", "all")
CACHE_DTYPES = ("exact", "float16")
_DIGESTS: dict[tuple[Any, ...], str] = {}


def model_digest(path: Any) -> str:
    """XXH3-128 over the names and content digests of every file of model folder ``path``
    (:func:`~poolkit.io.integrity.model_files`); memoised per file sizes and times within the
    process."""
    from pathlib import Path

    from poolkit.io.integrity import fast_digest, fast_file_digest, model_files

    root = Path(path)
    files = model_files(root)
    stamp = tuple((p.as_posix(), (st := p.stat()).st_size, st.st_mtime_ns) for p in files)
    if stamp not in _DIGESTS:
        listing = [(p.relative_to(root).as_posix(), fast_file_digest(p)) for p in files]
        _DIGESTS[stamp] = fast_digest(json.dumps(listing).encode())
    return _DIGESTS[stamp]


@dataclass
class CacheCounts:
    """What the cache did: texts read from it and the time reading took, texts encoded and
    the forward time of the batches that held them, and ``recorded_seconds``: the forward
    time the texts read had taken when they were encoded (each row's share of its batch's
    time, by tokens), so a cost measured on a warm run is the model's, not the disk's."""

    texts_read: int = 0
    texts_encoded: int = 0
    read_seconds: float = 0.0
    encode_seconds: float = 0.0
    recorded_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def open_state_cache(
    cache_dir: Any = None,
    *,
    max_size: int | str = DEFAULT_MAX_BYTES,
    layers: str = "used",
    dtype: str = "exact",
) -> StateCache:
    """A :class:`StateCache` over the token states under ``cache_dir`` (default
    :func:`poolkit._cache.cache_root`), bounded by ``max_size`` (bytes, or ``"20G"``);
    set it as an encoder's ``state_cache``::

        encoder.state_cache = open_state_cache()
    """
    from poolkit._cache import cache_root

    store = TokenStore(cache_root(cache_dir), max_bytes=parse_size(max_size, "max_size"))
    return StateCache(store, layers=layers, dtype=dtype)


def _is_torch(backend: Any) -> bool:
    return type(backend).__module__ == "poolkit.backends.pytorch"


class StateCache:
    """Token states of an encoder's batches, kept in ``store``.

    ``layers``: ``"used"`` keeps what each run computes (the last layer, or every layer
    for recipes that mix layers); ``"all"`` computes and keeps every layer (torch backend),
    so a later layer mix reads instead of encoding. ``dtype``: ``"exact"`` or
    ``"float16"`` (half the space, not bit-exact). :attr:`counts` adds up across runs.
    """

    def __init__(self, store: TokenStore, *, layers: str = "used", dtype: str = "exact"):
        if layers not in CACHE_LAYERS:
            value_error("cache_layers", " or ".join(map(repr, CACHE_LAYERS)), repr(layers))
        if dtype not in CACHE_DTYPES:
            value_error("cache_dtype", " or ".join(map(repr, CACHE_DTYPES)), repr(dtype))
        self.store = store
        self.layers = layers
        self.dtype = dtype
        self.counts = CacheCounts()
        self._names: dict[tuple[Any, ...], str] = {}
        self._every: set[str] = set()  # the namespaces whose entries hold every layer

    def namespace(self, encoder: Any, all_layers: bool, window: tuple[str, int | None]) -> str:
        """The namespace of ``encoder``'s states with every layer or the last, under
        long-text policy ``window`` (``(long_text, stride)``); opened in the store."""
        key = (id(encoder), all_layers, window)
        if key not in self._names:
            from poolkit._versions import installed
            from poolkit.io.integrity import fast_digest

            backend = encoder.backend
            about = {
                "model": encoder.info.reference,
                "model_files": model_digest(encoder.info.path),
                "backend": getattr(encoder, "backend_name", None) or type(backend).__qualname__,
                "backend_class": f"{type(backend).__module__}.{type(backend).__qualname__}",
                "quantize": getattr(encoder, "quantize", None),
                "calibration": getattr(encoder, "calibration_digest", None),
                "device": str(getattr(backend, "device", "cpu")),
                "model_dtype": str(getattr(backend, "dtype", None)),
                "stored_dtype": self.dtype,
                "versions": {
                    "torch": installed("torch"),  # from the metadata: nothing imported
                    "transformers": installed("transformers"),
                    "onnxruntime": installed("onnxruntime"),
                    "openvino": installed("openvino"),
                },
                "max_length": encoder.max_length,
                "long_text": window[0],
                "stride": window[1] if window[0] == "window" else None,
                "layers": "all" if all_layers else "last",
            }
            keyed = {k: v for k, v in about.items() if k != "model"}  # the content, not the name
            name = fast_digest(json.dumps(keyed, sort_keys=True).encode()).split(":")[1][:24]
            self.store.open(name, about)
            self._names[key] = name
            if all_layers:
                self._every.add(name)
        return self._names[key]

    def lookup(self, ids: list[np.ndarray]) -> list[str]:
        """Each row's key: XXH3-128 of ``ids``, the token ids fed to the model."""
        return [row_key(x) for x in ids]

    def _scoped(
        self, encoder: Any, keys: list[str], all_layers: bool, window: tuple[str, int | None]
    ) -> tuple[list[str], list[str | None]]:
        """The keys a batch of rows ``keys`` (in batch order) is stored under, and the
        namespace holding each (None: not stored; the last layer is read from a last-layer
        entry or an every-layer one).

        A row's states are keyed by the batch it was encoded in (its rows' keys in order)
        and its place there: the same ids padded into another batch may differ in the last
        bits (the kernels' blocking follows the batch's shape), so only the same batch is
        read back, and every number stays the uncached run's.
        """
        from poolkit.io.integrity import fast_digest

        batch = fast_digest("\n".join(keys).encode()).split(":")[1]
        scoped = [f"{batch}.{j}" for j in range(len(keys))]
        spaces = [] if all_layers else [self.namespace(encoder, False, window)]
        spaces.append(self.namespace(encoder, True, window))
        found = [next((ns for ns in spaces if self.store.has(ns, k)), None) for k in scoped]
        return scoped, found

    def forward(
        self,
        encoder: Any,
        lay: dict[str, np.ndarray],
        keys: list[str],
        all_layers: bool,
        window: tuple[str, int | None],
        run: Callable[[bool], Any],
    ) -> Any:
        """The forward pass of the laid-out batch ``lay`` whose rows have ``keys``
        (:meth:`lookup`): read where every row of this batch is stored, else
        ``run(all_layers)`` and the rows not stored yet stored."""
        start = time.perf_counter()
        keys, found = self._scoped(encoder, keys, all_layers, window)
        mask = np.asarray(lay["attention_mask"]) != 0
        if all(ns is not None for ns in found):
            old = self._read(keys, found, all_layers)
            if old is not None:
                self.counts.texts_read += len(keys)
                self.counts.read_seconds += time.perf_counter() - start
                self.counts.recorded_seconds += sum(
                    self.store.seconds_of(ns, k) for k, ns in zip(keys, found, strict=True) if ns
                )
                return self._assemble(encoder, old[0], old[1], mask, all_layers)
        compute_all = all_layers or (self.layers == "all" and _is_torch(encoder.backend))
        out = run(compute_all)
        took = time.perf_counter() - start
        self.counts.encode_seconds += took
        self.counts.texts_encoded += len(keys)
        write_to = self.namespace(encoder, compute_all, window)
        rows, dtype = _split_rows(out, mask)
        items = {k: self._stored(a) for k, a in zip(keys, rows, strict=True)
                 if not self.store.has(write_to, k)}  # fmt: skip
        tokens = mask.sum(axis=1)
        share = [took * t / max(int(tokens.sum()), 1) for k, t in zip(keys, tokens, strict=True)
                 if k in items]  # fmt: skip
        self.store.put(write_to, items, "bfloat16" if dtype == "bfloat16" else None, share)
        return out[-1] if compute_all and not all_layers else out

    def _stored(self, a: np.ndarray) -> np.ndarray:
        return a.astype(np.float16) if self.dtype == "float16" and a.dtype == np.float32 else a

    def _read(
        self, keys: list[str], spaces: list[str | None], all_layers: bool
    ) -> tuple[list[np.ndarray], str] | None:
        """Each key's array from its namespace (the last layer of an every-layer entry where
        only the last is asked) and the stored dtype name; None if any is gone."""
        out = []
        name = ""
        for key, ns in zip(keys, spaces, strict=True):
            assert ns is not None
            got = self.store.get(ns, [key])
            if got is None:
                return None
            every = ns in self._every
            out.append(got[0][-1] if every and not all_layers else got[0])
            name = self.store.dtype_of(ns, key)
        return out, name

    def _assemble(
        self, encoder: Any, states: list[Any], dtype: str, mask: np.ndarray, all_layers: bool
    ) -> Any:
        """The padded ``(B, L, H)`` batch (a tuple of them with ``all_layers``) holding each
        row's states at its real tokens, zeros elsewhere, as the backend returns it."""
        first = states[0]
        b, length = mask.shape
        shape = (*first.shape[:-2], b, length, first.shape[-1])
        # float16 states of --cache-dtype float16 go back to float32 (the exact mode keeps
        # whatever the model gave, a float16 model's float16 included).
        host = np.float32 if self.dtype == "float16" and first.dtype == np.float16 else first.dtype
        torch_out = None
        if _is_torch(encoder.backend):
            import torch

            # torch's own allocation (64-byte aligned, as the model's outputs are): a reduction
            # kernel's vectorised order depends on where the data starts, and NumPy aligns to
            # 16 bytes only, so a read batch pooled from NumPy memory could differ in the last
            # bit from the same batch encoded.
            torch_out = torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, host)).dtype)
            out = torch_out.numpy()
        else:
            out = np.zeros(shape, dtype=host)
        for j, a in enumerate(states):
            lo, hi = _real_span(mask[j])
            out[..., j, lo:hi, :] = a
        if torch_out is not None:
            t = torch_out
            if dtype == "bfloat16":
                t = t.view(torch.bfloat16)
            arr: Any = t.to(encoder.backend.device)
        else:
            arr = out
        if all_layers:
            return tuple(arr[i] for i in range(arr.shape[0]))
        return arr


def row_key(ids: np.ndarray) -> str:
    """A row's key: XXH3-128 of its int64 token ids."""
    from poolkit.io.integrity import fast_digest

    return fast_digest(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).split(":")[1]


def _split_rows(out: Any, mask: np.ndarray) -> tuple[list[np.ndarray], str]:
    """Each row's states at its real tokens, ``(n_j, H)`` (``(layers, n_j, H)`` for a tuple
    of layers), as host NumPy, and the dtype name (bfloat16 kept as its uint16 bits)."""
    layers = out if isinstance(out, tuple) else (out,)
    name = str(getattr(layers[0], "dtype", "")).removeprefix("torch.")
    host = [_host(x) for x in layers]
    stacked = np.stack(host) if isinstance(out, tuple) else host[0]
    rows = []
    for j in range(mask.shape[0]):
        lo, hi = _real_span(mask[j])
        rows.append(np.ascontiguousarray(stacked[..., j, lo:hi, :]))
    return rows, name if name == "bfloat16" else str(stacked.dtype)


def _real_span(mask: np.ndarray) -> tuple[int, int]:
    """``[lo, hi)`` of a row's real tokens in its ``(L,)`` bool mask (one run: the padding
    sits on one side); ``(0, 0)`` for a row of none."""
    cols = np.flatnonzero(mask)
    return (int(cols[0]), int(cols[-1]) + 1) if cols.size else (0, 0)


def _host(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        import torch

        x = x.detach().cpu()
        return (
            x.view(torch.int16).numpy().view(np.uint16) if x.dtype == torch.bfloat16 else x.numpy()
        )
    return np.asarray(x)
