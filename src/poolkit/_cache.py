"""Where poolkit caches what it builds once (ONNX exports, resolved tokenizers)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$POOLKIT_CACHE``, else ``$XDG_CACHE_HOME/poolkit``, else
    ``~/.cache/poolkit``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("POOLKIT_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "poolkit"
