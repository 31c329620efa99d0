"""``--format onnx`` of a multi-vector recipe: transformer, projection, scoring mask and
per-token normalisation as one ONNX graph.

Inputs: ``input_ids`` and ``attention_mask`` ``(batch, sequence)`` int64, right-padded (plus
``token_type_ids`` when the model takes them, and ``is_query`` ``(1,)`` int64 when the folder
treats the two sides differently: query expansion, or a skiplist on one side only).
Outputs: ``token_embeddings`` ``(batch, width, D)`` float32 and ``token_mask``
``(batch, width)`` int64; text ``i``'s vectors are ``token_embeddings[i][token_mask[i] == 1]``,
in token order, and every other row is zeros. ``width`` is the sequence length, or for
queries with expansion at least the expansion length: the graph appends the ``[MASK]``
tokens itself (attended to or not, as the folder says), so the caller only prepends the
side's prompt and truncates to the side's length.

The rule is poolkit's (:func:`poolkit.multivector.encode.iter_token_vectors`), written once
more in torch ops so that it traces into a graph; the export is checked against
``poolkit.embed`` before it is published.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from poolkit.deploy.graph import model_flags, model_inputs
from poolkit.multivector.folder import LateInteraction

__all__ = ["OUTPUTS", "build_token_graph", "sides_differ", "token_module"]

OUTPUTS = ("token_embeddings", "token_mask")


def sides_differ(late: LateInteraction) -> bool:
    """Whether the graph needs ``is_query``: queries are expanded, or the skiplist applies
    to documents only."""
    return late.expansion is not None or (bool(late.skip_ids) and not late.skip_queries)


def token_module(
    model: Any, late: LateInteraction, normalize: bool, dims: int | None, pad_id: int
) -> Any:
    """A torch module: ``(input_ids, attention_mask[, token_type_ids][, is_query])`` ->
    ``(token_embeddings (B, W, D), token_mask (B, W))`` (module docstring).

    ``model``: the Hugging Face encoder (float32, eager attention); ``late``: the folder's
    token pipeline; ``normalize``: L2 per token (again after ``dims``); ``pad_id``: the id
    the expansion columns start from before they become ``[MASK]``.
    """
    import torch

    from poolkit.head import Head, apply_head

    takes_types, positions = model_flags(model)
    exp = late.expansion
    flag = sides_differ(late)
    head = Head(steps=late.steps)

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("skip", torch.tensor(list(late.skip_ids) or [-1]))

        def forward(self, input_ids: Any, attention_mask: Any, *rest: Any) -> Any:
            rest_ = list(rest)
            types = rest_.pop(0) if takes_types else None
            query = rest_.pop(0) if flag else None
            ids, mask = input_ids, attention_mask
            scored = mask > 0
            if exp is not None:
                ids, mask, types, scored = self._expand(ids, mask, types, query)
            # Positions from each row's first scored token: expansion columns get the
            # positions they have after the text, as they do in poolkit's padded batch.
            kwargs = model_inputs(ids, mask, types, takes_types=takes_types,
                                  positions=positions, counted=scored)  # fmt: skip
            hidden = self.model(**kwargs).last_hidden_state
            if late.skip_ids:
                skipped = (ids[:, :, None] == self.skip[None, None, :]).any(-1)
                if flag and not late.skip_queries:
                    skipped = skipped & (query[0] == 0)
                scored = scored & ~skipped
            x = apply_head(head, hidden, normalize=normalize)
            if dims is not None and dims < x.shape[-1]:
                x = x[..., :dims]
                if normalize:
                    x = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            x = x * scored[:, :, None].to(x.dtype)
            return x, scored.long()

        def _expand(self, ids: Any, mask: Any, types: Any, query: Any) -> tuple[Any, ...]:
            # Queries: at least exp.length columns, the padding among the first exp.length
            # replaced by the expansion token, scored (and attended when exp.attend).
            length = exp.length
            batch = ids.shape[0]
            width = torch.maximum(torch._shape_as_tensor(ids)[1], length * query[0])
            cols = torch.arange(width)
            extra_ids = torch.full_like(ids[:, :1], pad_id).expand(batch, length)
            ids = torch.cat([ids, extra_ids], 1).index_select(1, cols)
            zeros = torch.zeros_like(extra_ids)
            mask = torch.cat([mask, zeros], 1).index_select(1, cols)
            if types is not None:
                types = torch.cat([types, zeros], 1).index_select(1, cols)
            added = (mask == 0) & (cols[None, :] < length) & (query[0] > 0)
            ids = torch.where(added, torch.full_like(ids, exp.token_id), ids)
            scored = (mask > 0) | added
            if exp.attend:
                mask = scored.long()
            return ids, mask, types, scored

    return Tokens().eval(), takes_types


def build_token_graph(
    hf_dir: Path, late: LateInteraction, normalize: bool, dims: int | None, pad_id: int, path: Path
) -> dict[str, Any]:
    """Export the token graph of ``hf_dir`` + ``late`` to ``path``; returns
    ``{"opset", "inputs", "outputs"}``."""
    from poolkit.backends.onnx import OPSET, load_torch, trace_to_onnx

    model = load_torch(hf_dir)
    module, takes_types = token_module(model, late, normalize, dims, pad_id)
    axes = {0: "batch", 1: "width"}
    names = trace_to_onnx(module, int(model.config.vocab_size), takes_types,
                          dict.fromkeys(OUTPUTS, axes), path, is_query=sides_differ(late))  # fmt: skip
    return {"opset": OPSET, "inputs": names, "outputs": list(OUTPUTS)}


def run_token_graph(
    runner: Any, tokenizer: Any, texts: list[str], prompt: str | None, query: bool | None
) -> list[np.ndarray]:
    """Each text's kept token vectors from the graph (an ``OnnxRunner``'s session), as a
    caller runs it: the side's ``prompt`` prepended, ``tokenizer`` (the side's file),
    ``is_query`` when the graph takes it."""
    from poolkit.deploy import encoded_feed

    feed = encoded_feed(runner, tokenizer.encode_batch([(prompt or "") + t for t in texts]))
    if "is_query" in runner.input_names:
        feed["is_query"] = np.array([int(bool(query))], dtype=np.int64)
    vectors, mask = runner.session.run(list(OUTPUTS), feed)
    return [v[m == 1] for v, m in zip(vectors, mask, strict=True)]
