"""The sparse recipe names and what each computes (no imports: :mod:`poolkit.recipe` reads it).

A SPLADE weight for vocabulary term ``v`` of a text is ``reduce_t act(logit[t, v])`` over
the text's real tokens ``t`` (the MLM head's logits), where ``act`` is
``log(1 + ReLU(x))`` (sentence-transformers' ``activation_function="relu"``, SPLADE v2/++)
or ``log(1 + log(1 + ReLU(x)))`` (its ``"log1p_relu"``, OpenSearch's models), and
``reduce`` is ``max`` (SPLADE v2 and later) or ``sum`` (the first SPLADE).
"""

from __future__ import annotations

__all__ = ["SPARSE_STRATEGIES", "SparseStrategy", "sparse_strategy_name"]

# name -> (pooling, activation), spelled as sentence-transformers' SpladePooling spells them.
SPARSE_STRATEGIES: dict[str, tuple[str, str]] = {
    "splade": ("max", "relu"),
    "splade_sum": ("sum", "relu"),
    "splade_log1p": ("max", "log1p_relu"),
    "splade_sum_log1p": ("sum", "log1p_relu"),
}

SparseStrategy = tuple[str, str]


def sparse_strategy_name(pooling: str, activation: str) -> str | None:
    """The recipe name of a SpladePooling ``(pooling_strategy, activation_function)``;
    ``None`` for a pair poolkit does not know."""
    return next((n for n, pair in SPARSE_STRATEGIES.items() if pair == (pooling, activation)), None)
