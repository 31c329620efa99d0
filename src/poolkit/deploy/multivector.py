"""``poolkit export`` of a multi-vector recipe (``multivector:tokens[/poolF][/l2|/raw][/DIMS]``).

Two formats, each checked against ``poolkit.embed`` on both sides before it is published:

- ``"sentence-transformers"`` (:mod:`poolkit.deploy.mvfolder`): a ``MultiVectorEncoder``
  folder; ``encode_query``/``encode_document`` give ``poolkit.embed(..., prompt_name=
  "query"|"document")``'s token vectors. Holds ``/poolF`` (``HierarchicalTokenPooling``) and
  ``/DIMS`` (``truncate_dim``, which L2-normalises: refused with ``/raw``).
- ``"onnx"`` (:mod:`poolkit.deploy.mvgraph`): one graph with the projection, the scoring mask
  (skiplist, query expansion) and per-token normalisation inside, ``tokenizer.json``
  (documents) and ``query_tokenizer.json`` (queries) with each side's truncation; the caller
  prepends the side's prompt. Token pooling is refused (Ward clustering is no graph op).

``/muvera`` and ``/PRECISION`` are refused by both: no folder format holds them, and both
apply to the exported token vectors unchanged (:func:`poolkit.multivector.muvera_encode`,
:func:`poolkit.output.quantize`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.recipe import Recipe

__all__ = ["MV_CHECK_TEXTS", "check_export", "export_recipe"]

# Both sides are checked on these: a question, one letter (query expansion fills most of
# the query), punctuation (the skiplist), a non-Latin text, a typed [MASK], and one past
# any side's length (truncation).
MV_CHECK_TEXTS = (
    "how do cats sleep?",
    "a",
    "The dog, barked! (twice); and then: nothing.",
    "Zwei Hunde spielen im Schnee. 東京は日本の首都です。",
    "a [MASK] typed in the middle of a text",
    " ".join(["late interaction keeps one vector per token"] * 40),
)
QUERY_TOKENIZER = "query_tokenizer.json"
TOL = 1e-5

_MVE_LOAD = """\
from sentence_transformers import MultiVectorEncoder

model = MultiVectorEncoder("{dir}")
queries = model.encode_query(["how do cats sleep?"])  # (tokens, {dim}) per text
documents = model.encode_document(["Cats sleep sixteen hours a day."])
scores = model.similarity(queries, documents)  # MaxSim
"""

_ONNX_LOAD = """\
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

session = ort.InferenceSession("{dir}/model.onnx")
names = {{i.name for i in session.get_inputs()}}


def token_vectors(texts, query):
    # The side's prompt goes before each text; the side's tokenizer truncates and pads.
    tokenizer = Tokenizer.from_file("{dir}/{query_file}" if query else "{dir}/tokenizer.json")
    prompt = {query_prompt} if query else {document_prompt}
    enc = tokenizer.encode_batch([prompt + t for t in texts])
    feed = {{"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
            "token_type_ids": [e.type_ids for e in enc], "is_query": [int(query)]}}
    feed = {{k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}}
    vectors, mask = session.run(["token_embeddings", "token_mask"], feed)
    return [v[m == 1] for v, m in zip(vectors, mask)]  # (tokens, {dim}) per text
"""


def check_export(
    recipe: Recipe, format: str, quantize: str | None, normalize: bool | None = None
) -> None:
    """Refuse, in one line, what ``format`` cannot hold of the multi-vector ``recipe``
    (``normalize``: resolved on the model, once it is known; before that the recipe's own)."""
    plain = str(recipe.replace(muvera=None, precision=None))
    if recipe.muvera is not None:
        opts = ",".join(f"{k}={v}" for k, v in recipe.muvera.to_json().items())
        value_error("recipe", "a token-vector recipe (no format holds MUVERA)", repr(str(recipe)),
                    f"Export {plain!r} and fold each text's exported token vectors with "
                    f"poolkit.multivector.muvera_encode (or fastembed's Muvera) using {opts}, "
                    "queries with query=True.")  # fmt: skip
    if recipe.precision is not None:
        value_error("recipe", "one without /PRECISION (the folders give float32 token vectors)",
                    repr(str(recipe)), f"Export {plain!r}, and quantise the stored vectors "
                    f"with poolkit.output.quantize(vectors, {recipe.precision!r}).")  # fmt: skip
    if quantize is not None:
        value_error("quantize", "None for a multi-vector recipe", repr(quantize),
                    "Export the fp32 graph.")  # fmt: skip
    if format == "onnx" and recipe.pool_factor is not None:
        value_error("recipe", "one without /poolF with `format='onnx'` (Ward clustering per text "
                    "is no graph op)", repr(str(recipe)), "Use `format='sentence-transformers'`, "
                    "whose HierarchicalTokenPooling module pools the same way, or pool the "
                    "graph's token vectors with poolkit.multivector.pool_tokens.")  # fmt: skip
    unit = recipe.normalize if normalize is None else normalize
    if format == "sentence-transformers" and recipe.dims is not None and unit is False:
        value_error("recipe", "normalised (/l2) with /DIMS in a sentence-transformers folder",
                    repr(str(recipe)), "Its truncate_dim L2-normalises the truncated vectors: "
                    "drop /raw, or use `format='onnx'`.")  # fmt: skip


def export_recipe(
    encoder: Any, recipe: Recipe, choice: dict[str, Any], out: Path, replace: bool, format: str,
    quantize: str | None,
) -> Path:  # fmt: skip
    """Write ``encoder``'s token vectors under ``recipe`` to ``out`` as ``format``; checked
    against ``poolkit.embed`` on both sides first, so a failed export writes nothing."""
    from poolkit.backends.onnx import transformer_dir
    from poolkit.deploy import new_record, write_folder
    from poolkit.multivector.api import check_width, side_prompt
    from poolkit.multivector.encode import late_interaction, side_length

    info = encoder.info
    late = late_interaction(encoder)
    normalize = recipe.resolved_normalize(late.normalize)
    check_export(recipe, format, quantize, normalize)
    if format == "onnx" and late.keep_ids is not None:
        value_error("model", "a folder without keep_only_token_ids with `format='onnx'` (the "
                    "graph's mask has no allowlist)", f"the {late.source}'s MultiVectorMask",
                    "Use `format='sentence-transformers'`, whose MultiVectorMask keeps it.")  # fmt: skip
    width = check_width(encoder, recipe)
    prompts = {side: side_prompt(late, side, None) or "" for side in ("query", "document")}
    lengths = {side: side_length(late, side, encoder.max_length) for side in prompts}
    record = new_record(encoder, recipe, format, choice, description=_describe(recipe, late),
                        normalize=normalize, width=width,
                        source={"pooling": "one vector per token (late interaction)",
                                "pooling_source": f"the {late.source}"})  # fmt: skip
    record["multivector"] = {
        "prompts": prompts,
        "max_length": lengths,
        "query_expansion": None if late.expansion is None else asdict(late.expansion),
        "skiplist_ids": list(late.skip_ids),
        "skiplist_sides": ["query", "document"] if late.skip_queries else ["document"],
        "pool_factor": recipe.pool_factor,
    }
    source = Path(info.path)

    def write(work: Path) -> str:
        if format == "sentence-transformers":
            from poolkit.deploy.mvfolder import write_mve_folder

            record["modules"] = write_mve_folder(
                source, transformer_dir(source), work, late, encoder.tokenizer,
                normalize=normalize, dims=recipe.dims, pool_factor=recipe.pool_factor,
                max_length=encoder.max_length)  # fmt: skip
            return _MVE_LOAD.format(dir=os.fspath(out), dim=width)
        _write_graph(encoder, recipe, late, normalize, lengths, prompts, work, record)
        return _ONNX_LOAD.format(dir=os.fspath(out), dim=width, query_file=QUERY_TOKENIZER,
                                 query_prompt=json.dumps(prompts["query"]),
                                 document_prompt=json.dumps(prompts["document"]))  # fmt: skip

    return write_folder(out, replace, record, write)


def _describe(recipe: Recipe, late: Any) -> str:
    text = f"token vectors of the {late.source}"
    if late.steps:
        text += " after its projection"
    if recipe.pool_factor is not None:
        text += f", documents token-pooled by {recipe.pool_factor:g} (Ward)"
    if recipe.dims is not None:
        text += f", first {recipe.dims} dimensions"
    return text


def _write_graph(
    encoder: Any,
    recipe: Recipe,
    late: Any,
    normalize: bool,
    lengths: dict[str, int],
    prompts: dict[str, str],
    work: Path,
    record: dict[str, Any],
) -> None:
    from poolkit.backends.onnx import require_onnx, runtime_tokenizer, transformer_dir
    from poolkit.deploy import onnx_record, require_agreement
    from poolkit.deploy.mvgraph import build_token_graph

    require_onnx()
    pad = encoder.special_tokens.pad_id
    graph = build_token_graph(transformer_dir(encoder.info.path), late, normalize, recipe.dims,
                              pad, work / "model.onnx")  # fmt: skip
    files = {"document": "tokenizer.json", "query": QUERY_TOKENIZER}
    for side, name in files.items():
        tok = runtime_tokenizer(encoder)
        tok.no_truncation()
        tok.enable_truncation(max_length=lengths[side])
        tok.save(str(work / name))
    agreement = _check(work, files, prompts, encoder, recipe)
    require_agreement(agreement, 1e-4, "token graph to agree with poolkit.embed within 1e-4 "
                      "(max abs diff)")  # fmt: skip
    record["onnx"] = onnx_record(graph, outputs=graph["outputs"], padding="right", tokenizers=files)
    record["agreement"] = {
        **agreement,
        "summary": f"the ONNX graph's token vectors equal poolkit.embed's within "
        f"{agreement['max_abs_diff']:.1e} (max abs) on {agreement['texts']} texts per side, "
        "as one batch and one text at a time",
    }


def _check(
    work: Path, files: dict[str, str], prompts: dict[str, str], encoder: Any, recipe: Recipe
) -> dict[str, Any]:
    """Max abs difference of the graph's token vectors from ``poolkit.embed``'s, both sides,
    one batch and one text at a time (a different token count is infinitely far)."""
    from tokenizers import Tokenizer

    from poolkit.backends.onnx import OnnxRunner
    from poolkit.deploy import quiet_embed
    from poolkit.deploy.mvgraph import OUTPUTS, run_token_graph

    runner = OnnxRunner(work / "model.onnx", output=OUTPUTS[0])
    texts = list(MV_CHECK_TEXTS)
    worst = 0.0
    for side, name in files.items():
        tok = Tokenizer.from_file(str(work / name))
        ref = quiet_embed(texts, encoder, recipe, prompt_name=side)
        query = side == "query"
        runs = [run_token_graph(runner, tok, texts, prompts[side], query)]
        runs.append([run_token_graph(runner, tok, [t], prompts[side], query)[0] for t in texts])
        for got in runs:
            for a, b in zip(got, ref, strict=True):
                worst = max(worst, float(np.abs(a - b).max()) if a.shape == b.shape else np.inf)
    return {"texts": len(texts), "sides": list(files), "max_abs_diff": worst}
