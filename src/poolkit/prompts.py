"""Which prompt goes before the texts: the user's, a named one, or the model's default.

sentence-transformers models list named prompts in ``config_sentence_transformers.json``
(``"query": "query: "``) and may name a ``default_prompt_name``; the model's pipeline puts
the prompt text before every text, tokenized together. ``prompt=""`` turns a default off.
"""

from __future__ import annotations

from typing import Any

from poolkit._errors import value_error

__all__ = [
    "PIPELINES",
    "SIDES",
    "check_pipeline",
    "check_prompt_pooling",
    "resolve_prompt",
    "side_of",
]

PIPELINES = ("full", "pooled")
SIDES = ("query", "document")


def side_of(prompt_name: str | None) -> str:
    """``"query"`` for ``prompt_name="query"``, else ``"document"``: the side a text takes
    where a model has two (multi-vector query expansion, an inference-free sparse model's
    query route). The one rule for every path: library, CLI, Ray and compare."""
    return "query" if prompt_name == "query" else "document"


def check_pipeline(pipeline: Any) -> str:
    """``pipeline`` if it is ``"full"`` or ``"pooled"``; else InputError naming it."""
    if pipeline not in PIPELINES:
        value_error("pipeline", "'full' (the model's pipeline: pooling and every module after "
                     "it) or 'pooled' (the pooled vectors, before any module after pooling)",
                     repr(pipeline))  # fmt: skip
    return str(pipeline)


def resolve_prompt(info: Any, prompt_name: str | None, prompt: str | None) -> str | None:
    """The prompt text for a model whose :class:`~poolkit.ModelInfo` is ``info``.

    ``prompt`` wins (``""``: none); else ``prompt_name`` looked up in ``info.prompts``;
    else ``info.default_prompt_name``'s prompt, as the model's pipeline does; else ``None``.

    Raises:
        InputError: both given, a wrong type, or a name the model does not list.
    """
    if prompt is not None and prompt_name is not None:
        value_error("prompt", "None when `prompt_name` is given", f"{prompt!r:.40}", "Pass one.")
    if prompt is not None:
        if not isinstance(prompt, str):
            value_error("prompt", "a str", type(prompt).__name__)
        return prompt or None
    name = prompt_name if prompt_name is not None else info.default_prompt_name
    if name is None:
        return None
    if name in ("query", "document") and name not in info.prompts and _routed(info):
        return None  # the name picks the route of an inference-free sparse model
    if not isinstance(name, str) or name not in info.prompts:
        known = ", ".join(repr(k) for k in sorted(info.prompts)) or "none"
        value_error("prompt_name", f"one of the model's prompts ({known})", repr(name),
                     "Pass `prompt='...'` for a prompt of your own.")  # fmt: skip
    return info.prompts[name] or None


def _routed(info: Any) -> bool:
    """Whether ``info``'s model routes queries apart (:mod:`poolkit.sparse.router`)."""
    return getattr(info, "query_route", None) is not None


def check_prompt_pooling(info: Any, prompt: str | None, strategies: list[str]) -> None:
    """Refuse ``weighted_mean`` with a prompt left out of pooling: the model's pipeline
    weighs tokens by their position counted from the prompt's first token, poolkit from
    the first pooled token, so the vectors would differ."""
    if prompt and not info.include_prompt and "weighted_mean" in strategies:
        value_error(
            "strategy",
            "a pooling other than weighted_mean with a prompt that the model keeps out of "
            "pooling (include_prompt: false)",
            "weighted_mean: the model's pipeline counts positions from the prompt, poolkit "
            "from the text",
            "Pass prompt='' or another strategy.",
        )
