"""``--format onnx`` for a sparse recipe: the masked-LM model and SPLADE pooling as one graph.

Inputs are the dense graph's (``input_ids``, ``attention_mask``, and ``token_type_ids`` when
the model has them; ``(batch, sequence)`` int64). Outputs (:data:`SPARSE_OUTPUTS`):

- ``sparse_embedding`` ``(batch, vocabulary)`` float32: every term's weight, zeros
  included, equal to ``poolkit.embed(...).toarray()``; with ``/topK`` all but each row's
  ``K`` largest weights are zero.
- with ``/topK`` also ``top_indices`` ``(batch, K)`` int64 (term ids, largest weight first)
  and ``top_values`` ``(batch, K)`` float32 (their weights): the row as a short list. A text
  with fewer than ``K`` active terms has zeros at the end of ``top_values``, whose ids
  mean nothing.

Inside: the MLM head's logits ``(batch, sequence, vocabulary)``, the activation, and max or
sum over the real tokens (the attention mask). Unlike :func:`poolkit.embed`, which projects a
slice of real tokens at a time, the graph holds the whole logits tensor: 4 bytes x batch x
sequence x vocabulary (62 MB per 512-token text at BERT's 30522 terms), so serve it with
bounded batches. Position ids count from each row's first real token, as the dense graph's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from poolkit.recipe import Recipe
from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = ["SPARSE_OUTPUTS", "build_sparse_graph", "check_sparse_folder", "sparse_module"]

SPARSE_OUTPUTS = ("sparse_embedding", "top_indices", "top_values")
CHECK_BATCH = 3  # texts per checked batch: the graph holds (batch, sequence, vocabulary) logits


def output_names(recipe: Recipe) -> list[str]:
    """The graph's outputs for ``recipe``: the dense row, and the top-k pair with ``/topK``."""
    return list(SPARSE_OUTPUTS if recipe.top_k is not None else SPARSE_OUTPUTS[:1])


def sparse_module(mlm: Any, recipe: Recipe) -> tuple[Any, bool]:
    """A torch module ``(input_ids, attention_mask[, token_type_ids])`` -> the outputs of
    :func:`output_names` (``(B, V)``, then ``(B, K)`` ids and weights), and whether it takes
    ``token_type_ids``. ``mlm``: the ``*ForMaskedLM`` model (float32, eager attention)."""
    import torch

    from poolkit.deploy.graph import model_flags, model_inputs
    from poolkit.sparse.mlm import head_chain

    base, head = mlm.base_model, head_chain(mlm)
    pooling, activation = SPARSE_STRATEGIES[recipe.strategy]
    takes_types, positions = model_flags(base)
    top_k = recipe.top_k

    def act(x: Any) -> Any:
        x = x.relu().log1p()
        return x.log1p() if activation == "log1p_relu" else x

    class SparsePipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base, self.head = base, head

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kwargs = model_inputs(input_ids, attention_mask, token_type_ids,
                                  takes_types=takes_types, positions=positions)  # fmt: skip
            logits = self.head(self.base(**kwargs).last_hidden_state)  # (B, L, V)
            real = attention_mask[:, :, None].to(logits.dtype)
            if pooling == "max":
                # act is non-decreasing with act(0) = 0: the max of act over real tokens is
                # act of the max with padding set to 0, one activation per term.
                pooled = act((logits * real).amax(1))
            else:
                pooled = (act(logits) * real).sum(1)
            if top_k is None:
                return pooled
            values, ids = torch.topk(pooled, k=min(top_k, pooled.shape[1]), dim=1)
            return torch.zeros_like(pooled).scatter(1, ids, values), ids, values

    return SparsePipeline().eval(), takes_types


def build_sparse_graph(
    hf_dir: Path, recipe: Recipe, path: Path, *, reference: str
) -> dict[str, Any]:
    """Trace the masked-LM model of ``hf_dir`` with ``recipe``'s pooling to ``path``.

    Returns ``{"opset", "inputs", "outputs", "vocabulary"}``. Raises NoMLMHeadError for a
    checkpoint without a masked-LM head.
    """
    import torch

    from poolkit.backends.onnx import OPSET, OnnxRunner, trace_to_onnx
    from poolkit.sparse.mlm import load_mlm_model

    mlm = load_mlm_model(hf_dir, dtype=torch.float32, reference=reference, recipe=str(recipe),
                         attn_implementation="eager")  # fmt: skip
    module, takes_types = sparse_module(mlm, recipe)
    vocab = int(mlm.config.vocab_size)
    outputs = output_names(recipe)
    trace_to_onnx(module, vocab, takes_types, {n: {0: "batch"} for n in outputs}, path)
    runner = OnnxRunner(path, output=outputs[0])
    return {"opset": OPSET, "inputs": list(runner.input_names), "outputs": outputs,
            "vocabulary": vocab}  # fmt: skip


def check_sparse_folder(
    folder: Path, graph: str, tokenizer: Any, encoder: Any, recipe: Recipe, texts: list[str]
) -> dict[str, Any]:
    """Run the folder as a bare runtime would and compare with ``poolkit.embed``.

    ``texts`` in right- and left-padded batches of :data:`CHECK_BATCH` and one at a time.
    Returns the max abs diff of ``sparse_embedding`` to the CSR rows made dense, and with
    ``/topK`` of ``top_values`` to each row's sorted largest weights and of the weights the
    reference has at ``top_indices``.
    """
    from poolkit.backends.onnx import OnnxRunner
    from poolkit.deploy import encoded_feed, padded_runs, quiet_embed

    ref = quiet_embed(texts, encoder, recipe).toarray()
    runner = OnnxRunner(folder / graph, output="sparse_embedding")
    names = output_names(recipe)
    worst = {"sparse_embedding": 0.0, "top_values": 0.0, "top_indices": 0.0}
    for start, enc in padded_runs(tokenizer, texts, CHECK_BATCH):
        got = dict(zip(names, runner.session.run(names, encoded_feed(runner, enc)), strict=True))
        want = ref[start : start + len(enc)]
        _worse(worst, "sparse_embedding", got["sparse_embedding"], want)
        if recipe.top_k is not None:
            k = got["top_values"].shape[1]
            _worse(worst, "top_values", got["top_values"], -np.sort(-want, axis=1)[:, :k])
            at = np.take_along_axis(want, got["top_indices"], axis=1)
            _worse(worst, "top_indices", got["top_values"], at)
    out = {"texts": len(texts),
           "batches": [f"right-padded by {CHECK_BATCH}", f"left-padded by {CHECK_BATCH}",
                       "one text each"],
           "max_abs_diff": max(worst.values())}  # fmt: skip
    if recipe.top_k is not None:
        out["max_abs_diff_by_output"] = worst
    return out


def _worse(worst: dict[str, float], key: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.size:
        worst[key] = max(worst[key], float(np.abs(got - want).max()))
