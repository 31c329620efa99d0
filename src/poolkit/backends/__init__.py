"""Runtimes for the encoder's forward pass, picked by name from one registry.

A backend turns token ids into hidden states ``(B, L, H)`` (:class:`Backend`); pooling
stays in the core functions (``poolkit.sequence_embedding`` and friends), so every backend
pools the same way. :func:`make_backend` builds one by name; ``Encoder(backend=...)`` uses it.

- ``torch`` (:mod:`poolkit.backends.pytorch`): ``transformers`` in PyTorch, any device/dtype.
- ``onnx`` (:mod:`poolkit.backends.onnx`): ONNX Runtime on the CPU, fp32 or dynamic int8
  (extra ``poolkit[onnx]``), exported once and cached.
- ``openvino`` (:mod:`poolkit.backends.openvino`): that ONNX export converted to OpenVINO,
  on the CPU: fp32, bf16 (``dtype="bfloat16"``) or static int8 calibrated on the user's
  texts (``quantize="int8-static"``, ``calibrate=``; extra ``poolkit[openvino]``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poolkit._errors import value_error
from poolkit.backends.base import Backend

__all__ = [
    "BACKENDS",
    "QUANTIZATIONS",
    "QUANTIZED_BY",
    "Backend",
    "OnnxRunner",
    "load_onnx_runner",
    "make_backend",
]


@dataclass(frozen=True)
class _Entry:
    build: Callable[..., Backend]
    quantizations: tuple[str | None, ...]


def _cpu_only(backend: str, device: str | None, runtime: str) -> None:
    """Refuse a ``device`` other than the CPU for ``backend``, whose ``runtime`` runs on it."""
    if device not in ("auto", "cpu", None):
        value_error("device", f"'auto' or 'cpu' with backend={backend!r}", repr(device),
                    f"{runtime} runs on the CPU here.")  # fmt: skip


def _torch(path: Any, *, device: str, dtype: Any, quantize: str | None, threads: int | None,
           calibration: Any, defer: bool = False):  # fmt: skip
    from poolkit.backends.pytorch import TorchBackend, pick_device, resolve_dtype

    where = pick_device(device)
    return TorchBackend(path, device=where, dtype=resolve_dtype(dtype, where, path), defer=defer)


def _onnx(path: Any, *, device: str, dtype: Any, quantize: str | None, threads: int | None,
          calibration: Any, defer: bool = False):  # fmt: skip
    from poolkit.backends.onnx import OnnxBackend

    if dtype is not None and str(dtype).removeprefix("torch.") not in ("float32", "fp32"):
        value_error("dtype", "None or 'float32' with backend='onnx'", repr(dtype),
                    "Use backend='openvino' with dtype='bfloat16' for bf16 on the CPU.")  # fmt: skip
    _cpu_only("onnx", device, "ONNX Runtime")
    return OnnxBackend(path, quantize=quantize, threads=threads)


def _openvino(path: Any, *, device: str, dtype: Any, quantize: str | None, threads: int | None,
              calibration: Any, defer: bool = False):  # fmt: skip
    from poolkit.backends.openvino import OpenVinoBackend, precision_of

    _cpu_only("openvino", device, "poolkit's OpenVINO")
    return OpenVinoBackend(path, precision=precision_of(dtype, quantize), calibration=calibration,
                           threads=threads)  # fmt: skip


_REGISTRY: dict[str, _Entry] = {
    "torch": _Entry(_torch, (None,)),
    "onnx": _Entry(_onnx, (None, "int8")),
    "openvino": _Entry(_openvino, (None, "int8-static")),
}
BACKENDS: tuple[str, ...] = tuple(_REGISTRY)
QUANTIZATIONS: tuple[str | None, ...] = (None, "int8", "int8-static")
# Which backend offers each quantisation (for the message refusing it elsewhere).
QUANTIZED_BY: dict[str, str] = {
    q: name for name, entry in _REGISTRY.items() for q in entry.quantizations if q
}


def make_backend(
    name: str,
    path: str | os.PathLike[str],
    *,
    device: str = "auto",
    dtype: Any = None,
    quantize: str | None = None,
    threads: int | None = None,
    calibration: Any = None,
    defer: bool = False,
) -> Backend:
    """The backend registered as ``name`` for the model at ``path``.

    ``calibration``: tokenized calibration texts for ``quantize="int8-static"`` (see
    :func:`poolkit.backends.openvino.load_openvino_runner`). ``defer``: the torch backend
    loads its weights on first use (the exported runtimes load theirs now).

    Raises:
        ValueError: an unknown ``name``, or a ``quantize`` that backend does not offer.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        value_error(
            "backend", f"one of {', '.join(map(repr, BACKENDS))} or a Backend object", repr(name)
        )
    if quantize not in entry.quantizations:
        offered = " or ".join(["None", *(repr(q) for q in entry.quantizations if q)])
        home = QUANTIZED_BY.get(quantize) if isinstance(quantize, str) else None
        value_error("quantize", f"{offered} with backend={name!r}", repr(quantize),
                    f"Pass backend={home!r} to quantize." if home not in (None, name) else "")  # fmt: skip
    if calibration is not None and quantize != "int8-static":
        value_error("calibrate", "None without quantize='int8-static'", "calibration texts",
                    "Drop calibrate=, or pass backend='openvino', quantize='int8-static'.")  # fmt: skip
    return entry.build(path, device=device, dtype=dtype, quantize=quantize, threads=threads,
                       calibration=calibration, defer=defer)  # fmt: skip


def __getattr__(name: str) -> Any:
    # Lazy, so that `import poolkit.backends` never imports onnxruntime or torch.
    if name in ("OnnxRunner", "load_onnx_runner"):
        from poolkit.backends import onnx

        return getattr(onnx, name)
    raise AttributeError(f"module 'poolkit.backends' has no attribute {name!r}")
