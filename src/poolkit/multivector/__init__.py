"""Multi-vector (late-interaction) representations: one vector per token, scored by MaxSim.

The recipe level ``multivector:tokens`` (see :class:`poolkit.Recipe`) keeps every token's
vector after the model's own projection; ``/poolF`` pools them (:func:`pool_tokens`),
``/muvera`` folds them into one vector (:func:`muvera_encode`); :func:`maxsim` scores.
"""

from poolkit.multivector.muvera import MUVERA_DEFAULTS, MuveraOptions, muvera_encode
from poolkit.multivector.scoring import Ragged, maxsim, ragged
from poolkit.multivector.token_pooling import check_pool_factor, pool_tokens

__all__ = [
    "MUVERA_DEFAULTS",
    "MuveraOptions",
    "Ragged",
    "check_pool_factor",
    "maxsim",
    "muvera_encode",
    "pool_tokens",
    "ragged",
]
