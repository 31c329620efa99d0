"""``--format sentence-transformers`` for a sparse recipe: a ``SparseEncoder`` folder.

The folder is the masked-LM checkpoint (its files copied byte for byte) and two modules:
``MLMTransformer`` (the checkpoint, at the folder's root) and ``SpladePooling`` with the
recipe's ``pooling_strategy`` and ``activation_function``; a ``/topK`` recipe is
``max_active_dims: K`` in ``config_sentence_transformers.json``, which ``SparseEncoder``
reads as its default top-k. The module types are written as sentence-transformers 5.x
saves them (``sentence_transformers.sparse_encoder.models.*``), which later versions load
under their new names.
"""

from __future__ import annotations

from pathlib import Path

from poolkit.deploy.stfolder import copy_files, read_json, write_json
from poolkit.recipe import Recipe
from poolkit.sparse.names import SPARSE_STRATEGIES

__all__ = ["SPARSE_MODULES", "write_sparse_encoder"]

SPARSE_MODULES = (
    "sentence_transformers.sparse_encoder.models.MLMTransformer",
    "sentence_transformers.sparse_encoder.models.SpladePooling",
)
# The source's sentence-transformers files: rewritten here, never copied.
_SKIP = frozenset({"config_sentence_transformers.json", "sentence_bert_config.json"})


def write_sparse_encoder(
    source: Path, hf_dir: Path, dest: Path, recipe: Recipe, max_seq_length: int
) -> list[str]:
    """Write the ``SparseEncoder`` folder of ``recipe`` into ``dest`` (existing, empty).

    ``source``: the model folder (its ``config_sentence_transformers.json`` prompts are
    kept); ``hf_dir``: its masked-LM checkpoint folder. Returns the module kinds written.
    """
    copy_files(hf_dir, dest, _SKIP)
    pooling, activation = SPARSE_STRATEGIES[recipe.strategy]
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": SPARSE_MODULES[0]},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": SPARSE_MODULES[1]},
    ]
    write_json(dest / "modules.json", modules)
    (dest / "1_SpladePooling").mkdir()
    # No embedding_dimension: SpladePooling takes the vocabulary's, and the key's name
    # differs between sentence-transformers versions.
    write_json(dest / "1_SpladePooling" / "config.json",
                {"pooling_strategy": pooling, "activation_function": activation})  # fmt: skip
    sbert = read_json(hf_dir / "sentence_bert_config.json")
    sbert["max_seq_length"] = max_seq_length
    write_json(dest / "sentence_bert_config.json", sbert)
    st = read_json(source / "config_sentence_transformers.json")
    st.pop("__version__", None)
    st.update(model_type="SparseEncoder", similarity_fn_name="dot")
    st.pop("max_active_dims", None)  # the source's top-k is not the recipe's
    if recipe.top_k is not None:
        st["max_active_dims"] = recipe.top_k
    write_json(dest / "config_sentence_transformers.json", st)
    return ["MLMTransformer", "SpladePooling"]
