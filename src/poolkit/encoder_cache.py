"""The :class:`~poolkit.encoder.Encoder` for a model and its settings, loaded once: the two
most recent stay loaded, so the calls of one program (and the library, CLI, compare, export,
diagnose and the sparse recipes) share a model instead of loading it again."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from poolkit._errors import value_error
from poolkit.encoder import Encoder

__all__ = ["ModelRef", "get_encoder"]

ModelRef = str | os.PathLike[str] | Encoder | None

_CACHE: OrderedDict[tuple[Any, ...], Encoder] = OrderedDict()
_CACHE_SIZE = 2


def get_encoder(
    model: ModelRef = None,
    *,
    device: str = "auto",
    dtype: Any = None,
    max_length: int | None = None,
    backend: str = "torch",
    quantize: str | None = None,
    max_batch_tokens: int | None = None,
    calibrate: Sequence[str] | None = None,
) -> Encoder:
    """The :class:`Encoder` for these settings, loaded once and cached (two most recent).

    An :class:`Encoder` passed as ``model`` is returned as it is. ``backend``,
    ``quantize``, ``calibrate`` (see :class:`Encoder`) and ``max_batch_tokens`` (the
    default token budget of its batches) are passed to :class:`Encoder`.
    """
    if isinstance(model, Encoder):
        if max_length is not None and max_length != model.max_length:
            value_error(
                "max_length",
                f"None when `model` is an Encoder (it has max_length={model.max_length})",
                max_length,
                "Build the Encoder with the max_length you want.",
            )
        return model
    key = (
        None if model is None else os.fspath(model),
        device,
        str(dtype),
        max_length,
        backend,
        quantize,
        max_batch_tokens,
    )
    if calibrate is None and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    encoder = Encoder(model, device=device, dtype=dtype, max_length=max_length, backend=backend,
                      quantize=quantize, max_batch_tokens=max_batch_tokens, calibrate=calibrate)  # fmt: skip
    if calibrate is None:  # calibrated on these texts: built for this call, not cached
        _CACHE[key] = encoder
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return encoder
