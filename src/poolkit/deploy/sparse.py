"""``poolkit.export`` of a sparse (SPLADE) recipe: what each format holds, refused otherwise.

- ``"sentence-transformers"``: a ``SparseEncoder`` folder (:mod:`poolkit.deploy.sparse_folder`).
- ``"onnx"``: one graph with the pooling inside, ``tokenizer.json`` beside it
  (:mod:`poolkit.deploy.sparse_graph`), checked against ``poolkit.embed`` before it is
  published.

Both hold every sparse recipe (``splade``, ``splade_sum``, ``splade_log1p``,
``splade_sum_log1p``, each with ``/topK``). ``quantize`` is refused: int8 is checked by the
cosine of dense vectors, not by which terms stay active.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from poolkit._errors import value_error
from poolkit.deploy import ONNX_LOAD as _DENSE_ONNX_LOAD
from poolkit.recipe import Recipe
from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = ["check_export", "export_recipe"]

SPARSE_TOL = 1e-4  # max abs diff of a published graph's weights to poolkit.embed's

_ST_LOAD = """\
from sentence_transformers import SparseEncoder

model = SparseEncoder("{dir}")
vectors = model.encode(["A man is playing a guitar."])  # ({dim},) sparse, per text
"""

# The dense card's ONNX snippet, reading the sparse output instead.
_ONNX_LOAD = _DENSE_ONNX_LOAD.replace(
    '(vectors,) = session.run(["sentence_embedding"], feed)  # ({dim},) per text',
    '(weights,) = session.run(["sparse_embedding"], feed)  # ({dim},) per text, mostly zeros',
)

_TOP_LOAD = """\
ids, values = session.run(["top_indices", "top_values"], feed)  # ({k},) each, per text
"""


def check_export(recipe: Recipe, format: str, quantize: str | None) -> None:
    """Refuse, in one line, what the export of sparse ``recipe`` cannot do (either format
    holds every sparse recipe); before anything loads or is written."""
    if quantize is not None:
        value_error(
            "quantize",
            "None for a sparse recipe",
            f"{quantize!r} with {str(recipe)!r}",
            "Export it without `quantize` (the float32 graph); /topK keeps vectors short.",
        )


def export_recipe(
    encoder: Any, recipe: Recipe, choice: dict[str, Any], out: Path, replace: bool, format: str,
    quantize: str | None,
) -> Path:  # fmt: skip
    """Write the folder of sparse ``recipe`` on ``encoder``'s model as ``out``; returns it.

    ``choice``: where the recipe came from (the model card says it); ``replace``: replace an
    existing ``out`` once the new folder is complete.
    """
    from poolkit.backends.onnx import transformer_dir
    from poolkit.deploy import new_record, write_folder
    from poolkit.sparse.embed import mlm_head, vocab_size

    check_export(recipe, format, quantize)
    info = encoder.info
    width = vocab_size(mlm_head(encoder, str(recipe)))  # NoMLMHeadError before any write
    record = new_record(encoder, recipe, format, choice, description=describe(recipe),
                        normalize=False, width=width)  # fmt: skip
    hf_dir = transformer_dir(info.path)

    def write(work: Path) -> str:
        if format == "sentence-transformers":
            from poolkit.deploy.sparse_folder import write_sparse_encoder

            record["modules"] = write_sparse_encoder(Path(info.path), hf_dir, work, recipe,
                                                     encoder.max_length)  # fmt: skip
            load = _ST_LOAD
        else:
            _write_onnx(encoder, recipe, hf_dir, work, record)
            load = _ONNX_LOAD + (_TOP_LOAD if recipe.top_k is not None else "")
        return load.format(dir=os.fspath(out), dim=width, k=recipe.top_k)

    return write_folder(out, replace, record, write)


def describe(recipe: Recipe) -> str:
    """What ``recipe`` computes, in words, for the model card."""
    pooling, activation = SPARSE_STRATEGIES[recipe.strategy]
    act = "log(1 + ReLU(x))" if activation == "relu" else "log(1 + log(1 + ReLU(x)))"
    how = "max" if pooling == "max" else "sum"
    text = f"SPLADE: per vocabulary term the {how} over real tokens of {act} of its MLM logit x"
    return text + (f", the {recipe.top_k} largest weights kept" if recipe.top_k else "")


def _write_onnx(
    encoder: Any, recipe: Recipe, hf_dir: Path, work: Path, record: dict[str, Any]
) -> None:
    from poolkit.deploy import (
        CHECK_TEXTS,
        onnx_record,
        require_agreement,
        tokenizer_record,
        write_tokenizer,
    )
    from poolkit.deploy.sparse_graph import build_sparse_graph, check_sparse_folder

    graph = build_sparse_graph(hf_dir, recipe, work / "model.onnx",
                               reference=encoder.info.reference)  # fmt: skip
    tokenizer = write_tokenizer(encoder, work / "tokenizer.json")
    agreement = check_sparse_folder(work, "model.onnx", tokenizer, encoder, recipe,
                                    list(CHECK_TEXTS))  # fmt: skip
    require_agreement(agreement, SPARSE_TOL, f"graph to agree with poolkit.embed within "
                      f"{SPARSE_TOL} (max abs diff per weight)",
                      "Nothing was written. Use `format='sentence-transformers'`.")  # fmt: skip
    summary = (
        f"the ONNX graph's weights equal poolkit.embed's within "
        f"{agreement['max_abs_diff']:.1e} (max abs) on {agreement['texts']} texts, right- "
        "and left-padded, one text and many"
    )
    record.update(
        onnx=onnx_record(graph, outputs=graph["outputs"], output="sparse_embedding"),
        agreement={"fp32": agreement, "summary": summary},
        tokenizer=tokenizer_record(encoder),
    )
