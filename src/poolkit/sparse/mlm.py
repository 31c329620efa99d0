"""The masked-LM head of a checkpoint, alone: hidden states ``(T, H)`` to logits ``(T, V)``.

poolkit's encoder runs the base model; SPLADE needs the head on top of it. The head is
loaded from the same checkpoint with ``AutoModelForMaskedLM`` and kept without its base
(the decoder's weights stay tied to the word embeddings, as they were trained).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from poolkit.errors import InputError

__all__ = [
    "NoMLMHeadError",
    "check_mlm_architecture",
    "head_chain",
    "load_mlm_head",
    "load_mlm_model",
]

# The attribute chains a transformers *ForMaskedLM applies to the last hidden state, in
# order (BERT/DeBERTa: cls; RoBERTa/XLM-R/MPNet/CamemBERT: lm_head; ALBERT: predictions;
# DistilBERT: four modules; ELECTRA: two; ModernBERT: head then decoder).
_HEAD_CHAINS = (
    ("cls",),
    ("lm_head",),
    ("predictions",),
    ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),
    ("generator_predictions", "generator_lm_head"),
    ("head", "decoder"),
)


class NoMLMHeadError(InputError):
    """A sparse recipe on a model without a masked-language-model head."""


def _refuse(reference: str, recipe: str, why: str) -> Any:
    raise NoMLMHeadError(
        arg="model", expected=f"a model with a masked-language-model head for recipe {recipe!r} "
                 "(a *ForMaskedLM checkpoint, e.g. BertForMaskedLM, or a sentence-transformers "
                 "SparseEncoder folder)", got=f"{reference!r}, {why}", fix="Use a SPLADE model (e.g. naver/splade-v3) or a dense recipe."
    )  # fmt: skip


def check_mlm_architecture(path: str | os.PathLike[str], *, reference: str, recipe: str) -> None:
    """Refuse (:class:`NoMLMHeadError`) a checkpoint whose ``architectures`` name no
    ``*ForMaskedLM``, from its ``config.json`` alone: no weights are read."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    archs = [str(a) for a in config.get("architectures") or []]
    if not any(a.endswith("ForMaskedLM") for a in archs):
        _refuse(reference, recipe, f"which is {', '.join(archs) or 'of no stated architecture'}")


def load_mlm_head(
    path: str | os.PathLike[str], *, device: Any, dtype: Any, reference: str, recipe: str
) -> Any:
    """The MLM head of the checkpoint at ``path`` as a torch module ``(T, H) -> (T, V)``,
    in eval mode on ``device`` in ``dtype``: a :class:`~poolkit.sparse.split.SplitHead`
    where :func:`~poolkit.sparse.split.split_head` finds the decoder, else the whole head.

    Raises:
        NoMLMHeadError: the checkpoint has no trained MLM head (its ``architectures`` name no
            ``*ForMaskedLM``, or the head's weights are missing from it).
    """
    from poolkit.sparse.split import split_head

    model = load_mlm_model(path, dtype=dtype, reference=reference, recipe=recipe)
    head = head_chain(model)
    return (split_head(model, head) or head).to(device).eval()


def load_mlm_model(
    path: str | os.PathLike[str], *, dtype: Any, reference: str, recipe: str, **kwargs: Any
) -> Any:
    """The whole ``*ForMaskedLM`` model at ``path`` (base and head), in eval mode;
    ``kwargs`` go to ``from_pretrained`` (e.g. ``attn_implementation``). Raises
    :class:`NoMLMHeadError` as :func:`load_mlm_head` does."""
    from transformers import AutoModelForMaskedLM

    from poolkit._quiet import quiet_loading

    root = Path(path)
    check_mlm_architecture(root, reference=reference, recipe=recipe)
    with quiet_loading():
        try:
            model, info = AutoModelForMaskedLM.from_pretrained(
                os.fspath(root), dtype=dtype, output_loading_info=True, **kwargs
            )
        except ValueError as e:  # no masked-LM class for this model type
            _refuse(reference, recipe, str(e).splitlines()[0])
    missing = [k for k in info.get("missing_keys", ()) if not k.startswith(model.base_model_prefix)]
    if missing:
        _refuse(reference, recipe, f"whose checkpoint lacks the head's weights ({missing[0]})")
    if _chain(model) is None:
        _refuse(reference, recipe, f"whose head ({type(model).__name__}) poolkit cannot find")
    return model.eval()


def _chain(model: Any) -> tuple[str, ...] | None:
    return next((c for c in _HEAD_CHAINS if all(hasattr(model, a) for a in c)), None)


def head_chain(model: Any) -> Any:
    """The head of a :func:`load_mlm_model` model alone: ``(..., H) -> (..., V)`` logits,
    sharing its weights (the decoder stays tied to the word embeddings)."""
    import torch

    return torch.nn.Sequential(*(getattr(model, a) for a in _chain(model) or ()))
