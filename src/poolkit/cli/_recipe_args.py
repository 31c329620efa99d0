"""The pooling flags of ``poolkit embed`` (``--recipe``, or ``-s``/``--layers``/
``--exclude-special``/``--normalize``) as :class:`poolkit.Recipe` values, for both engines."""

from __future__ import annotations

import argparse
from typing import Any

from poolkit.errors import InputError

__all__ = ["intended_recipes", "recipes_from_args"]


def recipes_from_args(args: argparse.Namespace) -> tuple[dict[str, Any] | None, bool]:
    """``--recipe`` or ``-s``/``--layers``/``--exclude-special``/``--normalize`` as
    recipes, validated once (see :func:`poolkit.asked.resolve_recipes`); errors name flags."""
    from poolkit.asked import resolve_recipes
    from poolkit.cli._flags import RECIPE, flagged

    if args.recipe is not None and (
        args.strategy is not None or args.layers is not None or args.exclude_special
    ):
        raise InputError(expected="--recipe alone (it names the strategy, layers and special "
                         "tokens itself)", got="-s/--strategy, --layers or --exclude-special "
                         "is given too", fix="Drop those (e.g. --recipe "
                         "mean_no_special@last4).")  # fmt: skip
    from poolkit.asked import with_output_stage
    from poolkit.recipe import check_output_stage

    try:
        wanted, as_dict = resolve_recipes(
            args.strategy, args.recipe, layers=args.layers,
            exclude_special=args.exclude_special, normalize=args.normalize,
        )  # fmt: skip
        dims, precision = getattr(args, "dims", None), getattr(args, "precision", None)
        check_output_stage("sequence", dims, precision)  # before the model loads
        if wanted is not None:
            wanted = with_output_stage(wanted, dims, precision)
        return wanted, as_dict
    except (TypeError, ValueError) as e:
        raise flagged(e, RECIPE) from None


def intended_recipes(
    wanted: dict[str, Any] | None, info: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """``wanted``, or the intended pooling of the model ``info`` describes (a
    :class:`~poolkit.model_folder.ModelInfo`) shaped by the shorthand flags and the output
    stage's."""
    if wanted is not None:
        return wanted
    from poolkit.asked import with_output_stage
    from poolkit.cli._flags import RECIPE, flagged

    intended = {info.pooling: info.intended_recipe(layers=args.layers,
                                                   exclude_special=args.exclude_special,
                                                   normalize=args.normalize)}  # fmt: skip
    try:
        return with_output_stage(intended, getattr(args, "dims", None),
                                 getattr(args, "precision", None))  # fmt: skip
    except (TypeError, ValueError) as e:
        raise flagged(e, RECIPE) from None
