"""Pooling plugins as separate packages: written to a folder as an installer leaves them
(the module, and a ``.dist-info`` whose ``entry_points.txt`` declares the
``poolkit.poolings`` group), so putting the folder on ``sys.path`` or ``PYTHONPATH``
installs them for ``importlib.metadata``.

- ``poolkit-powermean`` 0.1: ``power_mean`` (the power mean, p = 3, of each dimension's
  absolute values), ``first_last`` (mean of the first and last real token), ``numpy_max`` (max over
  real tokens, computed in NumPy: it does not trace to ONNX).
- ``poolkit-badpool`` 0.2: ``mean`` (clashes with the built-in), ``wrong_shape``,
  ``nan_pool``, ``int_pool``.
"""

from __future__ import annotations

import sys
from pathlib import Path

POWERMEAN = '''\
"""poolkit-powermean: poolings for poolkit (entry-point group poolkit.poolings)."""

import numpy as np
import torch


def power_mean(token_states, attention_mask):
    """Power mean (p = 3) of |x| over the real tokens: (B, L, H), (B, L) -> (B, H)."""
    w = attention_mask[..., None].to(token_states.dtype)
    return ((token_states.abs() ** 3 * w).sum(1) / w.sum(1)) ** (1 / 3)


def first_last(token_states, attention_mask):
    """Mean of each row's first and last real token: (B, L, H), (B, L) -> (B, H)."""
    keep = attention_mask.bool()
    length = keep.shape[1]
    first = keep.int().argmax(1)
    last = length - 1 - keep.flip(1).int().argmax(1)
    rows = torch.arange(keep.shape[0], device=keep.device)
    return (token_states[rows, first] + token_states[rows, last]) / 2


def numpy_max(token_states, attention_mask):
    """Max over the real tokens, in NumPy: (B, L, H), (B, L) -> (B, H) NumPy."""
    h = token_states.numpy()
    keep = attention_mask.numpy().astype(bool)
    return np.where(keep[..., None], h, -np.inf).max(axis=1)
'''

BADPOOL = '''\
"""poolkit-badpool: poolings that break poolkit's rules, one rule each."""

import torch


def mean(token_states, attention_mask):
    return token_states.sum(1)


def wrong_shape(token_states, attention_mask):
    return token_states  # (B, L, H): not one vector per text


def nan_pool(token_states, attention_mask):
    return token_states.sum(1) * float("nan")


def int_pool(token_states, attention_mask):
    return token_states.sum(1).to(torch.int64)
'''

PACKAGES = {
    ("poolkit-powermean", "0.1", "poolkit_powermean"): (
        POWERMEAN, ("power_mean", "first_last", "numpy_max")),
    ("poolkit-badpool", "0.2", "poolkit_badpool"): (
        BADPOOL, ("mean", "wrong_shape", "nan_pool", "int_pool")),
}  # fmt: skip


def pyproject(dist: str, version: str, module: str, names: tuple[str, ...]) -> str:
    """The ``pyproject.toml`` that builds such a package."""
    points = "\n".join(f'{n} = "{module}:{n}"' for n in names)
    return (f'[project]\nname = "{dist}"\nversion = "{version}"\n\n'
            f'[project.entry-points."poolkit.poolings"]\n{points}\n')  # fmt: skip


def write_plugins(root: Path, *dists: str) -> Path:
    """The packages ``dists`` (default: poolkit-powermean) under ``root`` as installed
    (module + ``.dist-info``) and as sources (``src/<dist>/pyproject.toml``); returns
    ``root`` (the folder to put on the path)."""
    wanted = dists or ("poolkit-powermean",)
    for (dist, version, module), (source, names) in PACKAGES.items():
        if dist not in wanted:
            continue
        (root / f"{module}.py").write_text(source, encoding="utf-8")
        info = root / f"{module}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
        )
        points = "".join(f"{n} = {module}:{n}\n" for n in names)
        (info / "entry_points.txt").write_text(f"[poolkit.poolings]\n{points}", encoding="utf-8")
        (info / "top_level.txt").write_text(f"{module}\n", encoding="utf-8")
        src = root / "src" / dist
        src.mkdir(parents=True, exist_ok=True)
        (src / "pyproject.toml").write_text(pyproject(dist, version, module, names), "utf-8")
    return root


def forget_installed() -> None:
    """poolkit reads entry points once: make it read them again (and import afresh)."""
    import poolkit.poolings as registry

    registry._entries = None
    registry._loaded.clear()
    for module in ("poolkit_powermean", "poolkit_badpool"):
        sys.modules.pop(module, None)
