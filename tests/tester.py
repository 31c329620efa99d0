"""One tester for the pooling rules (the torchmetrics ``MetricTester`` idea).

A rule is a function of the hidden states (NumPy or torch). :func:`check_rule` runs it on one
input in every way the library promises to handle it (NumPy, torch, torch with autograd;
float16/bfloat16/float32/float64) and compares it with a float64 reference computed on
exactly the values the rule saw. :func:`padded_mask` draws right, left or mixed padding, so
every test module covers the padding sides through one generator instead of its own loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

DTYPES = ["float32", "float16", "bfloat16", "float64"]
TOL = {"float32": 1e-5, "float16": 1e-5, "bfloat16": 1e-5, "float64": 1e-10}
# "torch" CPU tensors are reduced through zero-copy NumPy views; tensors that need
# gradients (and bfloat16) run the same rules in the torch namespace: test both paths.
KINDS = ["numpy", "torch", "torch_autograd"]
KINDS_DTYPES = [(k, d) for k in KINDS for d in DTYPES if not (k == "numpy" and d == "bfloat16")]
SIDES = ["right", "left", "mixed"]


def as_kind(x: np.ndarray, kind: str, dtype: str) -> Any:
    """The input as it reaches the library: NumPy or torch, in ``dtype``."""
    if kind == "numpy":
        return x.astype(dtype)
    t = torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype))
    return t.requires_grad_(True) if kind == "torch_autograd" else t


def to_f64(x: Any) -> np.ndarray:
    return x.detach().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, np.float64)


def padded_mask(
    rng: np.random.Generator, lengths: np.ndarray, length: int, side: str
) -> np.ndarray:
    """``(B, length)`` bool: row ``i`` has ``lengths[i]`` real tokens, padded on ``side``
    (``right``, ``left``, or ``mixed``: each row either way)."""
    pos = np.arange(length)[None, :]
    right = pos < lengths[:, None]
    left = pos >= (length - lengths)[:, None]
    if side == "right":
        return right
    if side == "left":
        return left
    return np.where(rng.random(len(lengths))[:, None] < 0.5, right, left)


def check_rule(
    rule: Callable[[Any], Any],
    reference: Callable[[np.ndarray], np.ndarray],
    hidden: np.ndarray,
    kind: str,
    dtype: str,
    *,
    out_kind: bool = True,
) -> np.ndarray:
    """Run ``rule`` on ``hidden`` as ``kind``/``dtype`` and check it against ``reference``.

    Checks: the result equals ``reference`` (float64, on the values after the dtype cast)
    within the dtype's tolerance; it has the input's kind and float32 (float64 for float64
    input) dtype when ``out_kind``; the input is never modified. Returns the result as
    float64 NumPy for further checks.
    """
    x = as_kind(hidden, kind, dtype)
    before = to_f64(x).copy()
    out = rule(x)
    expected = reference(to_f64(x))
    if out_kind:
        assert type(out) is type(x), (type(out), type(x))
        assert str(out.dtype).endswith("float64" if dtype == "float64" else "float32")
    got = to_f64(out)
    np.testing.assert_allclose(got, expected, rtol=TOL[dtype], atol=TOL[dtype] * 10)
    np.testing.assert_array_equal(to_f64(x), before)  # never modified in place
    return got
