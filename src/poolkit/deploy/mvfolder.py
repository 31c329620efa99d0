"""``--format sentence-transformers`` of a multi-vector recipe: a ``MultiVectorEncoder`` folder.

Written from what poolkit reads in the source (:class:`poolkit.multivector.folder.
LateInteraction`), so a ``MultiVectorEncoder`` folder, a PyLate folder and a plain encoder
all come out as the same native format (sentence-transformers 6):

- the transformer files copied byte for byte, its ``sentence_bert_config.json`` with the
  max length, ``query_length``, ``document_length`` and ``query_expansion`` (token named);
- the source's token-level ``Dense`` folders (weights copied, reading ``token_embeddings``);
  none for a plain encoder;
- ``MultiVectorMask`` with the skiplist (the tokens poolkit resolved) and the source's
  ``keep_only_token_ids`` when there is a skiplist, an allowlist or query expansion (the
  mask is what scores the expansion tokens);
- ``Normalize`` over ``token_embeddings`` when the recipe normalises;
- ``HierarchicalTokenPooling`` (documents, one protected token, L2 after) for ``/poolF``;
- ``config_sentence_transformers.json``: ``model_type: MultiVectorEncoder``, the prompts
  (``[Q] ``/``[D] `` among them), ``truncate_dim`` for ``/DIMS``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from poolkit.deploy.stfolder import copy_files, read_json, write_json
from poolkit.multivector.folder import (
    MVE_MODEL_TYPE,
    PYLATE_MODEL_TYPE,
    LateInteraction,
    pipeline_modules,
)

__all__ = ["write_mve_folder"]

_ST = "sentence_transformers."
_TYPES = {
    "Transformer": _ST + "base.modules.transformer.Transformer",
    "Dense": _ST + "base.modules.dense.Dense",
    "MultiVectorMask": _ST + "multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask",
    "Normalize": _ST + "base.modules.normalize.Normalize",
    "HierarchicalTokenPooling": _ST + "multi_vector_encoder.modules.token_pooling."
    "HierarchicalTokenPooling",
}
_TOKENS = {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"}
# Files of the source root that this writer replaces.
_SKIP = frozenset({"config_sentence_transformers.json", "sentence_bert_config.json"})


def dense_folders(source: Path) -> list[Path]:
    """The source's token-level ``Dense`` module folders, in pipeline order (none for a
    plain encoder, whose sentence-level modules poolkit's token vectors do not pass)."""
    kind = read_json(source / "config_sentence_transformers.json").get("model_type")
    if kind not in (MVE_MODEL_TYPE, PYLATE_MODEL_TYPE):
        return []
    return [source / path for name, path in pipeline_modules(source) if name == "Dense"]


def write_mve_folder(
    source: Path,
    hf_dir: Path,
    dest: Path,
    late: LateInteraction,
    tokenizer: Any,
    *,
    normalize: bool,
    dims: int | None,
    pool_factor: float | None,
    max_length: int,
) -> list[str]:
    """Write the ``MultiVectorEncoder`` folder into ``dest`` (existing, empty); returns the
    module kinds in pipeline order. ``tokenizer``: the Encoder's (names the skiplist and
    expansion tokens)."""
    from poolkit._versions import installed_versions

    copy_files(hf_dir, dest, _SKIP)
    names = tokenizer.convert_ids_to_tokens
    sbert = {k: v for k, v in read_json(hf_dir / "sentence_bert_config.json").items()
             if k not in ("query_length", "document_length", "query_expansion")}  # fmt: skip
    sbert["max_seq_length"] = max_length
    if late.query_length is not None:
        sbert["query_length"] = int(late.query_length)
    if late.document_length is not None:
        sbert["document_length"] = int(late.document_length)
    exp = late.expansion
    if exp is not None:
        sbert["query_expansion"] = {"strategy": exp.strategy, "attend": exp.attend,
                                    "token": names(exp.token_id), "length": exp.length}  # fmt: skip
    write_json(dest / "sentence_bert_config.json", sbert)

    kinds = ["Transformer"]
    modules: list[dict[str, Any]] = [
        {"idx": 0, "name": "0", "path": "", "type": _TYPES["Transformer"]}
    ]

    def add(kind: str, config: dict[str, Any] | None, copy_from: Path | None = None) -> None:
        i = len(modules)
        folder = dest / f"{i}_{kind}"
        if copy_from is not None:
            shutil.copytree(copy_from, folder)
        else:
            folder.mkdir()
        if config is not None:
            write_json(folder / "config.json", config)
        modules.append({"idx": i, "name": str(i), "path": folder.name, "type": _TYPES[kind]})
        kinds.append(kind)

    for src in dense_folders(source):
        add("Dense", {**read_json(src / "config.json"), **_TOKENS}, copy_from=src)
    if late.skip_ids or exp is not None or late.keep_ids is not None:
        words = [names(i) for i in late.skip_ids]
        tasks = ["query", "document"] if late.skip_queries else ["document"]
        keep = None if late.keep_ids is None else list(late.keep_ids)
        add("MultiVectorMask", {"skiplist_words": words, "skiplist_tasks": tasks,
                                "keep_only_token_ids": keep})  # fmt: skip
    if normalize:
        add("Normalize", dict(_TOKENS))
    if pool_factor is not None:
        factor: float | int = int(pool_factor) if pool_factor.is_integer() else pool_factor
        add("HierarchicalTokenPooling", {"pool_factor": factor, "max_tokens": None,
                                         "distance_threshold": None, "num_protected_tokens": 1,
                                         "normalize_embeddings": True, "tasks": ["document"]})  # fmt: skip
    write_json(dest / "modules.json", modules)
    versions = installed_versions("sentence-transformers", "transformers", "torch")
    config: dict[str, Any] = {
        "__version__": {"poolkit": versions["poolkit"]},
        "model_type": MVE_MODEL_TYPE,
        "prompts": dict(late.prompts),
        "default_prompt_name": None,
        "similarity_fn_name": "maxsim",
    }
    if dims is not None:
        config["truncate_dim"] = dims
    write_json(dest / "config_sentence_transformers.json", config)
    return kinds
