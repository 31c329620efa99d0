"""``--format sentence-transformers``: a recipe as a sentence-transformers model folder.

The folder is the source pipeline with its pooling set to the recipe: the transformer
files copied byte for byte, ``modules.json``, ``1_Pooling/config.json``, the source's
``Dense``/``LayerNorm`` module folders copied, a recipe's fitted transform as a ``Dense``
module, a ``Normalize`` module when the recipe normalises, ``sentence_bert_config.json``
and the tokenizer files.

Pooling is written with the ``pooling_mode_*`` keys every sentence-transformers version
reads; with them ``Pooling`` concatenates in one fixed order (cls, max, mean,
mean_sqrt_len, weighted_mean, last), so a recipe is expressible when its parts are
distinct, keep special tokens, come in that order, and pool the last layer only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from poolkit._errors import value_error
from poolkit.fitted import Fit
from poolkit.recipe import Recipe

__all__ = ["ST_ORDER", "copy_files", "copy_pipeline", "read_json", "st_pooling_config", "st_refusal",
           "write_json"]  # fmt: skip

# poolkit strategy -> sentence-transformers' legacy key, in Pooling's concatenation order.
ST_ORDER: tuple[tuple[str, str], ...] = (
    ("cls", "pooling_mode_cls_token"),
    ("max", "pooling_mode_max_tokens"),
    ("mean", "pooling_mode_mean_tokens"),
    ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"),
    ("weighted_mean", "pooling_mode_weightedmean_tokens"),
    ("last", "pooling_mode_lasttoken"),
)
_HEADS = ("Dense", "LayerNorm")  # pipeline modules after pooling that the folder keeps
_RANK = {name: i for i, (name, _) in enumerate(ST_ORDER)}


def st_refusal(recipe: Recipe) -> str | None:
    """What of ``recipe`` sentence-transformers' ``Pooling`` cannot express; None if all."""
    if recipe.level != "sequence":
        return f"a {recipe.level}-level recipe (sentence-transformers folders pool sequences)"
    if recipe.layers is not None:
        return f"the layer mix @{str(recipe).split('@')[1].split('/')[0]} (Pooling reads the last layer only)"
    names = [name for name, _ in recipe.parts]
    dropped = [name for name, drop in recipe.parts if drop]
    if dropped:
        return f"{dropped[0]}_no_special (Pooling cannot drop special tokens)"
    if recipe.user_poolings:
        return None  # a user's pooling: poolkit's own module pools (st_module.py)
    unknown = [n for n in names if n not in _RANK]
    if unknown:
        return f"the strategy {unknown[0]} (Pooling has cls, max, mean, mean_sqrt_len, weighted_mean, last)"
    if len(set(names)) != len(names):
        return f"{recipe.strategy} (Pooling uses each strategy once)"
    if names != sorted(names, key=_RANK.__getitem__):
        order = "+".join(sorted(names, key=_RANK.__getitem__))
        return (
            f"the order {recipe.strategy} (Pooling concatenates in the order "
            f"cls, max, mean, mean_sqrt_len, weighted_mean, last: {order})"
        )
    return None


def st_pooling_config(recipe: Recipe, hidden_size: int) -> dict[str, Any]:
    """``1_Pooling/config.json`` for ``recipe`` on a model of width ``hidden_size``: the
    ``pooling_mode_*`` keys, or, for a user's pooling, ``{"recipe", "word_embedding_dimension"}``
    (poolkit's :class:`~poolkit.deploy.st_module.RecipePooling`).

    Raises:
        InputError: the recipe cannot be expressed (:func:`st_refusal` says what).
    """
    reason = st_refusal(recipe)
    if reason is not None:
        value_error(
            "recipe",
            "one that sentence-transformers' Pooling can express",
            f"{str(recipe)!r}, which has {reason}",
            "Use `format='onnx'`, which carries any recipe.",
        )
    if recipe.user_poolings:  # the recipe, for poolkit's RecipePooling
        return {"recipe": str(recipe.pooling), "word_embedding_dimension": hidden_size}
    names = {name for name, _ in recipe.parts}
    config: dict[str, Any] = {"word_embedding_dimension": hidden_size}
    config.update({key: name in names for name, key in ST_ORDER})
    config["include_prompt"] = True
    return config


_SKIP = frozenset({"modules.json", "README.md", ".gitattributes", "poolkit-export.json"})


def copy_files(hf_dir: Path, dest: Path, skip: frozenset[str]) -> None:
    """Copy the model's files of ``hf_dir`` to ``dest`` byte for byte, never re-saved; not its
    subfolders (the pipeline's modules, stale onnx/ or openvino/ exports), nor the
    sentence-transformers files a writer replaces (:data:`_SKIP` and ``skip``)."""
    for f in sorted(hf_dir.iterdir()):
        if f.is_file() and f.name not in _SKIP | skip:
            shutil.copyfile(f, dest / f.name)


def read_json(path: Path) -> Any:
    """The JSON object or list at ``path``; ``{}`` when there is no file (or it holds neither)."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data if isinstance(data, dict | list) else {}


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def _modules(root: Path) -> list[dict[str, Any]]:
    return read_json(root / "modules.json") or []


def _kind(entry: dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def source_heads(root: Path) -> list[dict[str, Any]]:
    """The source pipeline's ``Dense``/``LayerNorm`` entries of ``modules.json``, in order.

    Raises:
        InputError: a module poolkit cannot carry over (anything but Transformer, Pooling,
            Normalize, Dense, LayerNorm).
    """
    heads = []
    for entry in _modules(root):
        kind = _kind(entry)
        if kind in _HEADS:
            heads.append(entry)
        elif kind not in ("Transformer", "Pooling", "Normalize"):
            value_error(
                "model",
                "a pipeline of Transformer, Pooling, Dense, LayerNorm and Normalize modules",
                f"one with a {kind} module ({entry.get('path')!r})",
                "Export the transformer folder alone.",
            )
    return heads


def copy_pipeline(
    source: Path,
    hf_dir: Path,
    dest: Path,
    pooling: dict[str, Any],
    normalize: bool,
    max_seq_length: int,
    dims: int | None = None,
    width: int | None = None,
    fit: Fit | None = None,
) -> list[str]:
    """Write the sentence-transformers folder into ``dest`` (existing, empty).

    ``source``: the model folder (``modules.json`` there if any); ``hf_dir``: its
    transformer folder. ``fit``: a recipe's fitted transform, a ``Dense`` module after the
    source's modules (and a ``Normalize`` where ``normalize``: it was fitted on normalised
    vectors). ``dims``: keep the first ``dims`` of the pipeline's ``width`` columns (after
    the transform; a recipe's ``/DIMS``), recorded as ``truncate_dim``. Returns the module
    kinds written, in pipeline order.
    """
    copy_files(hf_dir, dest, skip=frozenset())
    if hf_dir != source:
        for name in ("config_sentence_transformers.json",):
            if (source / name).is_file():
                shutil.copyfile(source / name, dest / name)
    modules: list[dict[str, Any]] = []

    def add(kind: str, type_: str | None = None) -> Path:
        # The next module's entry; its folder (the root for the Transformer) is the caller's.
        i = len(modules)
        path = f"{i}_{kind}" if i else ""
        modules.append({"idx": i, "name": str(i), "path": path,
                        "type": type_ or f"sentence_transformers.models.{kind}"})  # fmt: skip
        return dest / path

    add("Transformer")
    if "recipe" in pooling:  # poolkit's module: a user's pooling (see st_pooling_config)
        from poolkit.deploy.st_module import MODULE_TYPE

        add("Pooling", MODULE_TYPE).mkdir()
    else:
        add("Pooling").mkdir()
    write_json(dest / "1_Pooling" / "config.json", pooling)
    for entry in source_heads(source):
        shutil.copytree(source / str(entry.get("path") or ""), add(_kind(entry), entry["type"]))
    if fit is not None:
        if normalize:  # poolkit.embed transforms the normalised vectors the fit was made on
            add("Normalize").mkdir()
        _write_affine(add("Dense"), fit)
    if normalize and dims is not None and width is not None and dims < width:
        # sentence-transformers truncates after every module (Normalize included) and does
        # not normalise again; poolkit normalises the kept columns. A Dense module whose
        # weights are the first `dims` rows of the identity keeps those columns exactly
        # (each output is one input times 1 plus zeros) before Normalize.
        _write_slice(add("Dense"), width, dims)
    if normalize:
        add("Normalize").mkdir()
    write_json(dest / "modules.json", modules)
    sbert = read_json(hf_dir / "sentence_bert_config.json")
    sbert["max_seq_length"] = max_seq_length
    write_json(dest / "sentence_bert_config.json", sbert)
    if dims is not None:
        path = dest / "config_sentence_transformers.json"
        config = read_json(path)
        config["truncate_dim"] = dims
        write_json(path, config)
    return [_kind(m) for m in modules]


def _write_affine(folder: Path, fit: Fit) -> None:
    """A sentence-transformers ``Dense`` module giving ``fit.apply``'s ``(x - mean) @ W``
    as ``x @ W + b`` with ``b = -(mean @ W)``."""
    import numpy as np
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    matrix = np.asarray(fit.matrix, np.float64)
    # mean @ W in float64, rounded once to float32: a float32 product would round again.
    bias = -(np.asarray(fit.mean, np.float64) @ matrix)
    dense = Dense(fit.in_dim, fit.out_dim, bias=True, activation_function=torch.nn.Identity(),
                  init_weight=torch.tensor(matrix.T, dtype=torch.float32),
                  init_bias=torch.tensor(bias, dtype=torch.float32))  # fmt: skip
    folder.mkdir()
    dense.save(str(folder))


def _write_slice(folder: Path, width: int, dims: int) -> None:
    """A sentence-transformers ``Dense`` module keeping the first ``dims`` of ``width``."""
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    eye = torch.eye(width, dtype=torch.float32)[:dims].clone()  # its own storage
    dense = Dense(width, dims, bias=False, activation_function=torch.nn.Identity(),
                  init_weight=eye)  # fmt: skip
    folder.mkdir()
    dense.save(str(folder))
