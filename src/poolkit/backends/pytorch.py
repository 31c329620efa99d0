"""The default runtime: a ``transformers`` ``AutoModel`` in PyTorch, in eval mode."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from poolkit._errors import value_error

__all__ = [
    "TorchBackend",
    "default_dtype",
    "model_class",
    "pick_device",
    "resolve_dtype",
    "stored_dtype",
    "torch_dtype",
]


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


def _config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``config.json`` of the model at ``path``; ``{}`` when it cannot be read as an object."""
    try:
        with open(os.path.join(os.fspath(path), "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def stored_dtype(path: str | os.PathLike[str]) -> str | None:
    """The float type the checkpoint at ``path`` says it is stored in (``config.json``'s
    ``dtype``, or ``torch_dtype`` as older files spell it): ``"float32"``, ``"float16"``,
    ``"bfloat16"``, or ``None`` when it says none or something else."""
    config = _config(path)
    value = config.get("dtype") or config.get("torch_dtype")
    name = str(value).removeprefix("torch.") if value else None
    return name if name in ("float32", "float16", "bfloat16") else None


def default_dtype(device_type: str, stored: str | None, bf16_supported: bool) -> str:
    """The dtype ``dtype=None`` means, by where the model runs: the rule, kept pure.

    On the CPU (and MPS): ``"float32"``, always. On CUDA: what sentence-transformers
    (on transformers 5, ``dtype="auto"``) loads, the checkpoint's stored ``stored`` type,
    so that the same GPU gives the same vectors as ``SentenceTransformer(model)``: a
    float16 or bfloat16 checkpoint runs in that type (bfloat16 only where the GPU has it,
    else float32, since bfloat16-trained weights may overflow float16), a float32 one in
    float32. Half precision for a float32 checkpoint is asked for with ``dtype=``.
    """
    if device_type != "cuda" or stored not in ("float16", "bfloat16"):
        return "float32"
    if stored == "bfloat16" and not bf16_supported:
        return "float32"
    return stored


def resolve_dtype(dtype: Any, device: str, path: str | os.PathLike[str]) -> Any:
    """The torch dtype to load the model at ``path`` in on ``device``: ``dtype`` when
    given (see :func:`torch_dtype`), else :func:`default_dtype`'s choice."""
    import torch

    if dtype is not None:
        return torch_dtype(dtype)
    kind = torch.device(device).type
    bf16 = kind == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return torch_dtype(default_dtype(kind, stored_dtype(path) if kind == "cuda" else None, bf16))


def model_class(path: str | os.PathLike[str], default: Any) -> Any:
    """The ``transformers`` class to load: for an encoder-decoder (T5, mT5, UMT5) its
    encoder-only class (``T5EncoderModel``), as sentence-t5 pipelines run it, since
    embedding needs no decoder; else ``default`` (``AutoModel``)."""
    import transformers

    config = _config(path)
    arch = next((a for a in config.get("architectures") or [] if a.endswith("EncoderModel")), None)
    name = _ENCODER_ONLY.get(str(config.get("model_type")))
    if name is None and config.get("is_encoder_decoder"):
        name = arch
    return getattr(transformers, name, default) if name else default


# Encoder-decoder families whose encoder loads on its own (model_type -> class).
_ENCODER_ONLY = {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel", "umt5": "UMT5EncoderModel",
                 "longt5": "LongT5EncoderModel",
                 "switch_transformers": "SwitchTransformersEncoderModel"}  # fmt: skip


class TorchBackend:
    """The default :class:`~poolkit.backends.base.Backend`: a ``transformers``
    ``AutoModel`` in eval mode on ``device``, in ``dtype``.

    Attention runs through PyTorch's ``scaled_dot_product_attention`` (``"sdpa"``: fused
    kernels on CUDA) where ``transformers`` implements it for the architecture, else the
    eager path; :attr:`attention` says which. ``attention="eager"`` forces the latter.
    ``defer=True`` loads the weights when first needed (the first forward pass, or
    :attr:`model`), not now: a run whose token states all come from the cache
    (:mod:`poolkit.state_cache`) never loads them.
    """

    name = "torch"  # the backend's name (messages, the token-state cache's key)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str,
        dtype: Any,
        attention: str = "sdpa",
        defer: bool = False,
    ) -> None:
        import torch

        self.device = torch.device(device)
        self.dtype = dtype
        self._path, self._asked = path, attention
        self._model: Any = None
        if not defer:
            self._load()

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        from transformers import AutoModel

        from poolkit._quiet import quiet_loading

        path, attention, dtype = self._path, self._asked, self.dtype
        cls = model_class(path, AutoModel)
        with quiet_loading():  # transformers' loading bar; poolkit has its own progress
            try:
                model = cls.from_pretrained(os.fspath(path), dtype=dtype,
                                            attn_implementation=attention)  # fmt: skip
            except ValueError as e:  # no SDPA for this architecture: refused before loading
                if attention != "sdpa" or "scaled_dot_product_attention" not in str(e):
                    raise
                model = cls.from_pretrained(os.fspath(path), dtype=dtype,
                                            attn_implementation="eager")  # fmt: skip
        self._attention = str(getattr(model.config, "_attn_implementation", None) or "eager")
        model = model.to(self.device)
        model.eval()
        self._accepts = frozenset(inspect.signature(model.forward).parameters)
        self._model = model
        return model

    @property
    def model(self) -> Any:
        """The ``transformers`` model (loaded now if it was deferred)."""
        return self._load()

    @property
    def attention(self) -> str:
        """The attention implementation the model runs (``"sdpa"`` or ``"eager"``)."""
        self._load()
        return self._attention

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded (see ``defer``)."""
        return self._model is not None

    def forward(self, inputs: Mapping[str, np.ndarray], *, all_layers: bool = False) -> Any:
        import torch

        model = self._load()
        feed = {
            name: torch.from_numpy(array).to(self.device, non_blocking=True)
            for name, array in inputs.items()
            if name in self._accepts
        }
        with torch.inference_mode():
            out = model(**feed, output_hidden_states=all_layers, return_dict=True)
        if all_layers:
            return tuple(out.hidden_states)
        return out.last_hidden_state
