"""The built-in sequence strategy names and the suffix that drops special tokens: a leaf
module, so that :mod:`poolkit.sequence`, :mod:`poolkit.recipe` and the registry of user
poolings (:mod:`poolkit.poolings`) read them without importing one another; and how a
recipe's name becomes part of a file name (:func:`file_slug`)."""

from __future__ import annotations

import re

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


def file_slug(name: object) -> str:
    """``name`` (a recipe's, say) as part of a file name: runs of characters other than
    letters, digits and ``_.+-`` become ``-`` (``mean/pca128`` -> ``mean-pca128``)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", str(name)).strip("-")
