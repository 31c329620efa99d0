"""Compiled runtimes for the encoder's forward pass.

A backend turns token ids into hidden states ``(B, L, H)``; pooling stays in the core
functions (``poolkit.sequence_embedding`` and friends), so every backend pools the same way.

- :mod:`poolkit.backends.onnx`: ONNX Runtime, fp32 or dynamic int8 (extra ``poolkit[onnx]``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKENDS", "QUANTIZATIONS", "OnnxRunner", "load_onnx_runner"]

BACKENDS: tuple[str, ...] = ("torch", "onnx")
QUANTIZATIONS: tuple[str | None, ...] = (None, "int8")


def __getattr__(name: str) -> Any:
    # Lazy, so that `import poolkit.backends` never imports onnxruntime or torch.
    if name in ("OnnxRunner", "load_onnx_runner"):
        from poolkit.backends import onnx

        return getattr(onnx, name)
    raise AttributeError(f"module 'poolkit.backends' has no attribute {name!r}")
