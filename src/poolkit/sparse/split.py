"""An MLM head split into its transform and its vocabulary ``Linear``, for SPLADE pooling.

Imported only where a head is loaded or pooled (it imports torch; ``import poolkit`` does
not).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["SplitHead", "split_head"]


class SplitHead(torch.nn.Module):
    """An MLM head as ``transform`` ``(T, H) -> (T, H')`` (cheap) and the vocabulary
    ``decoder``, a ``Linear`` ``(T, H') -> (T, V)`` (the cost); calling it calls both.
    :func:`~poolkit.sparse.pooling.splade_pool` runs the parts apart."""

    def __init__(self, transform: Any, decoder: Any) -> None:
        super().__init__()
        self.transform = transform
        self.decoder = decoder

    def forward(self, x: Any) -> Any:
        return self.decoder(self.transform(x))


def split_head(model: Any, head: Any) -> SplitHead | None:
    """``head`` (:func:`~poolkit.sparse.mlm.head_chain` of ``model``) as a
    :class:`SplitHead` sharing its weights, or ``None`` (run ``head`` whole) when
    ``model``'s output embeddings are no ``Linear`` inside ``head`` or the parts do not
    give ``head``'s logits on a random probe (something after the decoder)."""
    decoder = model.get_output_embeddings()
    if not isinstance(decoder, torch.nn.Linear):
        return None
    path = next((n for n, m in head.named_modules() if m is decoder and n), None)
    if path is None:
        return None
    split = SplitHead(_without(head, path.split(".")), decoder)
    param = next(head.parameters())
    generator = torch.Generator().manual_seed(0)
    width = int(model.config.hidden_size)  # what the head takes: the last hidden state
    probe = torch.randn((3, width), generator=generator).to(param.device, param.dtype)
    with torch.inference_mode():
        try:
            same = torch.allclose(split(probe), head(probe), rtol=1e-4, atol=1e-4)
        except (RuntimeError, TypeError, ValueError):  # shapes the split cannot take
            same = False
    return split if same else None


def _without(module: Any, path: list[str]) -> Any:
    """A shallow copy of ``module`` whose submodule at ``path`` is an ``Identity``; the
    modules off the path (and every weight) are shared, ``module`` itself is unchanged."""
    if not path:
        return torch.nn.Identity()
    clone = copy.copy(module)
    clone.__dict__["_modules"] = dict(module._modules)
    clone._modules[path[0]] = _without(module._modules[path[0]], path[1:])
    return clone
