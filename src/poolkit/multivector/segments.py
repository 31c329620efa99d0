"""The multi-vector level of the recipe grammar: ``multivector:tokens`` and its segments
``/poolF`` and ``/muvera[:OPTIONS]``.

Registered with :mod:`poolkit.levels` when this module loads: :class:`poolkit.Recipe` reads
and checks the level's parts here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from poolkit._errors import value_error
from poolkit.levels import Level, one_of, register_level
from poolkit.multivector.muvera import MuveraOptions
from poolkit.multivector.token_pooling import check_pool_factor

__all__ = ["multivector_segment", "parse_muvera"]

_POOL = re.compile(r"pool(\d+(?:\.\d+)?)")
_MUVERA_KEYS = ("k_sim", "dim_proj", "r_reps", "seed")


def parse_muvera(text: str) -> MuveraOptions:
    """``muvera`` or ``muvera:k_sim=5,dim_proj=16,r_reps=20,seed=42`` (any subset)."""
    _, colon, rest = text.partition(":")
    options: dict[str, int] = {}
    for item in rest.split(",") if colon else []:
        key, eq, value = item.strip().partition("=")
        if key not in _MUVERA_KEYS or not eq or not value.strip().isdigit() or key in options:
            value_error("muvera", f"options among {', '.join(_MUVERA_KEYS)} as "
                                   "KEY=INTEGER, each once", repr(item), "e.g. muvera:k_sim=4,dim_proj=8.")  # fmt: skip
        options[key] = int(value)
    return MuveraOptions(**options)


def multivector_segment(low: str) -> tuple[str, Any] | None:
    """A trailing name segment of the multi-vector level as ``(field, value)``, else None."""
    match = _POOL.fullmatch(low)
    if match:
        return "pool_factor", float(match.group(1))
    if low == "muvera" or low.startswith("muvera:"):
        return "muvera", parse_muvera(low)
    return None


def _off_level(field: str, level: str, value: Any) -> None:
    value_error(field, f"None at the {level} level", repr(value), "Token pooling and MUVERA are multi-vector stages: "
                           "use multivector:tokens/...")  # fmt: skip


def _settle(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``pool_factor`` and ``muvera`` checked and settled, and what the level refuses
    (layers, int8/uint8 tokens): one :class:`InputError` line each."""
    pool_factor, muvera = fields["pool_factor"], fields["muvera"]
    if fields["layers"] is not None:
        value_error("layers", "None at the multivector level (the model's last "
                               "layer and projection)", repr(fields["layers"]), "Drop the @LAYERS part.")  # fmt: skip
    if fields["precision"] in ("int8", "uint8"):
        value_error("precision", "float32, float16, binary or ubinary at the "
                               "multivector level", fields["precision"], "int8/uint8 tokens (ranges calibrated on token vectors) "
                               "are not offered yet: use /float16, /binary or /ubinary.")  # fmt: skip
    if pool_factor is not None:
        pool_factor = check_pool_factor(pool_factor)
        if pool_factor == 1:
            pool_factor = None  # keeps every token: the same recipe as none
    if isinstance(muvera, dict):
        muvera = MuveraOptions(**muvera)
    if muvera is not None and not isinstance(muvera, MuveraOptions):
        muvera = parse_muvera(str(muvera))
    return {"pool_factor": pool_factor, "muvera": muvera}


register_level(
    Level(
        name="multivector",
        family="multivector",
        canonical=one_of(("tokens",)),
        expected="tokens at the multivector level (every token's vector)",
        names=("tokens",),
        fields=("pool_factor", "muvera"),
        settle=_settle,
        off_level=_off_level,
        segment=multivector_segment,
        output_stage=True,
        model_normalize=True,
        # MUVERA folds the token vectors into one dense vector.
        kind=lambda recipe: "multivector" if recipe.muvera is None else "dense",
        width=lambda recipe, hidden_size: hidden_size,  # per token, before the output stage
    )
)
