"""Shape facts of a ``config.json``, under whatever names the model family gives them.

Families name the same fact differently (DistilBERT ``dim``/``n_layers``, GPT-2
``n_embd``/``n_layer``, T5 ``d_model``/``num_layers``); transformers' config classes map
the standard names onto theirs (``attribute_map``), and poolkit reads that map rather than
keeping a list of its own. Position tables of the RoBERTa family start after the padding
index, so their usable length is shorter than the table.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OFFSET_POSITIONS", "config_int", "position_limit"]

# Fallbacks when transformers does not know the model type (a custom architecture).
_KNOWN_ALIASES = {
    "hidden_size": ("n_embd", "d_model", "dim"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
}

# Families whose position ids start at padding_idx + 1 (transformers'
# create_position_ids_from_input_ids): usable tokens = max_position_embeddings - pad - 1.
OFFSET_POSITIONS = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet", "longformer",
    "data2vec-text", "roberta-prelayernorm", "ibert", "luke", "markuplm", "xmod", "esm",
    "lilt", "layoutlmv3",
})  # fmt: skip


def _attribute_map(model_type: Any) -> dict[str, str]:
    if not isinstance(model_type, str):
        return {}
    try:  # only when the standard name is missing: importing transformers takes seconds
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {})
    except (ImportError, KeyError, ValueError):
        return {}


def config_int(config: dict[str, Any], name: str) -> int | None:
    """The positive int ``config`` (a parsed ``config.json``) holds for the standard
    transformers attribute ``name`` (e.g. ``hidden_size``), under the family's own key
    where its config class maps one; ``None`` when it holds none."""

    def ok(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    if ok(config.get(name)):
        return int(config[name])
    mapped = _attribute_map(config.get("model_type")).get(name)
    keys = (mapped,) if mapped else _KNOWN_ALIASES.get(name, ())
    for key in keys:
        if ok(config.get(key)):
            return int(config[key])
    return None


def position_limit(config: dict[str, Any]) -> tuple[int, str] | None:
    """Most tokens (specials included) the position table of ``config`` (a parsed
    ``config.json``) holds, and where that comes from: ``max_position_embeddings`` (GPT-2:
    ``n_positions``), less ``pad_token_id + 1`` for the RoBERTa family (514 -> 512);
    ``None`` when the config states no table."""
    key = "max_position_embeddings" if "max_position_embeddings" in config else "n_positions"
    positions = config.get(key)
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    if config.get("model_type") not in OFFSET_POSITIONS:
        return positions, f"config.json: {key}"
    pad = config.get("pad_token_id")
    pad = pad if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 1
    return positions - pad - 1, (f"config.json: {key} {positions} less pad_token_id {pad} + 1 "
                                 "(positions start after the padding index)")  # fmt: skip
