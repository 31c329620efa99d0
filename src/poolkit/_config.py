"""Shape facts of a ``config.json``, under whatever names the model family gives them.

Families name the same fact differently (DistilBERT ``dim``/``n_layers``, GPT-2
``n_embd``/``n_layer``, T5 ``d_model``/``num_layers``); transformers' config classes map
the standard names onto theirs (``attribute_map``), and poolkit reads that map rather than
keeping a list of its own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["config_int"]

# Fallbacks when transformers does not know the model type (a custom architecture).
_KNOWN_ALIASES = {
    "hidden_size": ("n_embd", "d_model", "dim"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
}


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
