"""The default runtime: a ``transformers`` ``AutoModel`` in PyTorch, in eval mode."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from poolkit._errors import value_error

__all__ = ["TorchBackend", "pick_device", "torch_dtype"]


def pick_device(device: str | None) -> str:
    """``device``, or for ``"auto"``/``None`` the best available: cuda, mps, else cpu."""
    import torch

    if device not in (None, "auto"):
        return str(device)
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def torch_dtype(dtype: Any) -> Any:
    """The torch dtype named by ``dtype`` (``None``: float32)."""
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16}  # fmt: skip
    if str(dtype) not in names:
        value_error("dtype", "one of float32, float16, bfloat16", repr(dtype))
    return names[str(dtype)]


class TorchBackend:
    """The default :class:`~poolkit.backends.base.Backend`: a ``transformers``
    ``AutoModel`` in eval mode on ``device``, in ``dtype``."""

    def __init__(self, path: str | os.PathLike[str], *, device: str, dtype: Any) -> None:
        import torch
        from transformers import AutoModel

        self.device = torch.device(device)
        self.dtype = dtype
        from poolkit._quiet import quiet_loading

        with quiet_loading():  # transformers' loading bar; poolkit has its own progress
            model = AutoModel.from_pretrained(os.fspath(path), dtype=dtype)
        self.model = model.to(self.device)
        self.model.eval()
        params = inspect.signature(self.model.forward).parameters
        self._accepts = frozenset(params)

    def forward(self, inputs: Mapping[str, np.ndarray], *, all_layers: bool = False) -> Any:
        import torch

        feed = {
            name: torch.from_numpy(array).to(self.device, non_blocking=True)
            for name, array in inputs.items()
            if name in self._accepts
        }
        with torch.inference_mode():
            out = self.model(**feed, output_hidden_states=all_layers, return_dict=True)
        if all_layers:
            return tuple(out.hidden_states)
        return out.last_hidden_state
