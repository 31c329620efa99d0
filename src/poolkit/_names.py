"""The built-in sequence strategy names and the suffix that drops special tokens: a leaf
module, so that :mod:`poolkit.sequence`, :mod:`poolkit.recipe` and the registry of user
poolings (:mod:`poolkit.poolings`) read them without importing one another."""

from __future__ import annotations

SEQUENCE_STRATEGIES: tuple[str, ...] = (
    "cls",
    "mean",
    "max",
    "min",
    "sum",
    "mean_sqrt_len",
    "weighted_mean",
    "last",
)

NO_SPECIAL = "_no_special"
