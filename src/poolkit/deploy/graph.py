"""``--format onnx``: transformer, the recipe's pooling and normalisation as one ONNX graph.

The graph takes ``input_ids`` and ``attention_mask`` (``(batch, sequence)`` int64; plus
``token_type_ids`` when the model has them) and returns ``sentence_embedding``
``(batch, D)``. Pooling inside it is poolkit's own vectorised torch rules
(:func:`poolkit.driver.sequence_vectors`, :func:`poolkit.layers.layer_mix`) traced once, so
the graph pools exactly as ``poolkit.embed`` does. Special tokens (for ``_no_special``) are
the ids poolkit's Encoder treats as special, compared inside the graph. Position ids are
counted from each row's first real token, so left and right padding give the same vectors.

Export, opset, int8 quantisation and the ONNX Runtime session come from
:mod:`poolkit.backends.onnx`; this module adds the pooling and the checks against
``poolkit.embed`` that a folder must pass before it is published.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._config import OFFSET_POSITIONS
from poolkit.recipe import Recipe

__all__ = ["build_graph", "model_flags", "model_inputs", "pipeline_module"]


def model_flags(model: Any) -> tuple[bool, bool]:
    """Whether the Hugging Face ``model`` takes ``token_type_ids``, and whether a graph must
    hand it position ids (counted over real tokens, see :func:`model_inputs`): not where its
    embeddings derive them from the ids and the padding id, counting from the first real
    token already (:data:`poolkit._config.OFFSET_POSITIONS`)."""
    takes_types = getattr(model.config, "type_vocab_size", 0) > 0
    positions = (
        "position_ids" in inspect.signature(model.forward).parameters
        and getattr(model.config, "model_type", None) not in OFFSET_POSITIONS
    )
    return takes_types, positions


def model_inputs(
    input_ids: Any, attention_mask: Any, token_type_ids: Any, *, takes_types: bool,
    positions: bool, counted: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """The encoder's keyword inputs inside a traced graph: zero token types where the model
    takes them and none were given; with ``positions``, position ids counted over real
    tokens (``counted``, default ``attention_mask``: so a left-padded row's first real
    token is position 0)."""
    import torch

    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    if takes_types:
        kwargs["token_type_ids"] = (
            torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        )
    if positions:
        real = attention_mask if counted is None else counted.long()
        kwargs["position_ids"] = (torch.cumsum(real, 1) - 1).clamp(min=0)
    return kwargs


def pipeline_module(
    model: Any, recipe: Recipe, special_ids: list[int], normalize: bool, head: Any = None
) -> Any:
    """A torch module: ``(input_ids, attention_mask[, token_type_ids])`` -> ``(B, D)``.

    ``model``: the Hugging Face encoder (float32, eager attention); ``special_ids``: the
    token ids that count as special for ``_no_special`` parts; ``head``: the model's
    modules after pooling (:class:`poolkit.head.Head`: Dense, LayerNorm), applied to the
    pooled vectors as :func:`poolkit.embed` applies them; ``normalize``: L2 at the end.
    """
    import torch

    from poolkit.driver import LayerViews, sequence_vectors

    takes_types, positions = model_flags(model)
    recipe = recipe.replace(normalize=normalize)  # resolved by the caller
    heads = {recipe: head} if head is not None else None

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("special", torch.tensor(special_ids or [-1], dtype=torch.int64))

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kwargs = model_inputs(input_ids, attention_mask, token_type_ids,
                                  takes_types=takes_types, positions=positions)  # fmt: skip
            out = self.model(**kwargs, output_hidden_states=recipe.all_layers)
            hidden = out.hidden_states if recipe.all_layers else out.last_hidden_state
            special = (input_ids[:, :, None] == self.special[None, None, :]).any(-1)
            views = LayerViews.of(hidden, attention_mask, special)
            # poolkit.embed's rule on the torch path (check=False: nothing to read back).
            return sequence_vectors(views, [recipe], heads=heads, check=False, host=False)[recipe]

    return Pipeline().eval(), takes_types


def build_graph(
    hf_dir: Path,
    recipe: Recipe,
    special_ids: list[int],
    normalize: bool,
    path: Path,
    head: Any = None,
) -> dict[str, Any]:
    """Export the pipeline of ``hf_dir`` + ``recipe`` to ``path`` and check it against the
    traced torch module on the padded check batches (left and right, 1 to 5 rows).

    Returns ``{"opset", "inputs", "max_abs_diff_vs_torch"}``. Raises ExportError when the
    graph disagrees with torch by more than the fp32 tolerance of the ONNX backend.
    """
    import torch

    from poolkit.backends.onnx import (
        FP32_TOL,
        OPSET,
        OnnxRunner,
        check_batches,
        load_torch,
        trace_to_onnx,
    )
    from poolkit.errors import ExportError

    model = load_torch(hf_dir)
    module, takes_types = pipeline_module(model, recipe, special_ids, normalize, head)
    vocab = int(model.config.vocab_size)
    trace_to_onnx(module, vocab, takes_types, {"sentence_embedding": {0: "batch"}}, path)
    runner = OnnxRunner(path, output="sentence_embedding")
    worst = 0.0
    for ids, mask in check_batches(vocab):
        with torch.inference_mode():
            ref = module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        try:
            got = runner(ids, mask)
        except Exception as e:  # onnxruntime's own kinds: no common base to name
            _refuse_untraceable(recipe, e)
            raise
        worst = max(worst, float(np.abs(got - ref).max()))
    if not worst <= FP32_TOL:
        raise ExportError(
            expected=f"the ONNX graph of recipe {str(recipe)!r} to agree with the torch model on "
            f"padded batches within {FP32_TOL} (max abs diff)",
            got=f"it differs by {worst:.3g}",
            fix="Nothing was written. Use `format='sentence-transformers'` if the recipe "
            "allows it.",
        )
    return {"opset": OPSET, "inputs": list(runner.input_names), "max_abs_diff_vs_torch": worst}


def _refuse_untraceable(recipe: Recipe, error: Exception) -> None:
    """An ExportError naming the user pooling of ``recipe`` whose graph failed to run on a
    check batch (traced with the batch size fixed: a Python ``range``, NumPy); returns where
    the recipe has none (the runtime's error stands: poolkit's own graph failed)."""
    from poolkit.errors import ExportError

    own = recipe.user_poolings
    if not own:
        return
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    raise ExportError(
        expected=f"the ONNX graph of recipe {str(recipe)!r} to run on batches of any size",
        got=f"onnxruntime failed on a check batch ({first[:160]})",
        fix=f"The pooling {own[0]!r} does not trace to ONNX for every batch: write it with "
        "tensor operations only (torch.arange(h.shape[0]), not range(len(h)); no NumPy), or "
        "use `format='sentence-transformers'`. Nothing was written.",
    ) from None
