"""Runtimes for the encoder's forward pass, picked by name from one registry.

A backend turns token ids into hidden states ``(B, L, H)`` (:class:`Backend`); pooling
stays in the core functions (``poolkit.sequence_embedding`` and friends), so every backend
pools the same way. :func:`make_backend` builds one by name; ``Encoder(backend=...)`` uses it.

- ``torch`` (:mod:`poolkit.backends.pytorch`): ``transformers`` in PyTorch, any device/dtype.
- ``onnx`` (:mod:`poolkit.backends.onnx`): ONNX Runtime on the CPU, fp32 or dynamic int8
  (extra ``poolkit[onnx]``), exported once and cached.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poolkit._errors import value_error
from poolkit.backends.base import Backend

__all__ = ["BACKENDS", "QUANTIZATIONS", "Backend", "OnnxRunner", "load_onnx_runner", "make_backend"]


@dataclass(frozen=True)
class _Entry:
    build: Callable[..., Backend]
    quantizations: tuple[str | None, ...]


def _torch(path: Any, *, device: str, dtype: Any, quantize: str | None, threads: int | None):
    from poolkit.backends.pytorch import TorchBackend, pick_device, torch_dtype

    return TorchBackend(path, device=pick_device(device), dtype=torch_dtype(dtype))


def _onnx(path: Any, *, device: str, dtype: Any, quantize: str | None, threads: int | None):
    from poolkit.backends.onnx import OnnxBackend

    return OnnxBackend(path, quantize=quantize, threads=threads)


_REGISTRY: dict[str, _Entry] = {
    "torch": _Entry(_torch, (None,)),
    "onnx": _Entry(_onnx, (None, "int8")),
}
BACKENDS: tuple[str, ...] = tuple(_REGISTRY)
QUANTIZATIONS: tuple[str | None, ...] = (None, "int8")


def make_backend(
    name: str,
    path: str | os.PathLike[str],
    *,
    device: str = "auto",
    dtype: Any = None,
    quantize: str | None = None,
    threads: int | None = None,
) -> Backend:
    """The backend registered as ``name`` for the model at ``path``.

    Raises:
        ValueError: an unknown ``name``, or a ``quantize`` that backend does not offer.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        value_error(
            "backend", f"one of {', '.join(map(repr, BACKENDS))} or a Backend object", repr(name)
        )
    if quantize not in entry.quantizations:
        value_error("quantize", f"None with backend={name!r}", repr(quantize),
                    "Pass backend='onnx' to quantize.")  # fmt: skip
    return entry.build(path, device=device, dtype=dtype, quantize=quantize, threads=threads)


def __getattr__(name: str) -> Any:
    # Lazy, so that `import poolkit.backends` never imports onnxruntime or torch.
    if name in ("OnnxRunner", "load_onnx_runner"):
        from poolkit.backends import onnx

        return getattr(onnx, name)
    raise AttributeError(f"module 'poolkit.backends' has no attribute {name!r}")
