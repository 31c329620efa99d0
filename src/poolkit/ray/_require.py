"""The one place that imports Ray, so a missing extra fails with one clear line."""

from __future__ import annotations

from types import ModuleType

__all__ = ["INSTALL_HINT", "RayNotInstalledError", "require_ray"]

INSTALL_HINT = "pip install 'poolkit[ray]'"


class RayNotInstalledError(ImportError):
    """Ray Data is not installed; the message names the install command."""


def require_ray() -> ModuleType:
    """Return the ``ray`` module (with ``ray.data`` imported), or raise
    :class:`RayNotInstalledError` naming ``pip install 'poolkit[ray]'``."""
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise RayNotInstalledError(
            f"poolkit's Ray features need Ray Data, which is not installed ({e.msg}): "
            f"{INSTALL_HINT}"
        ) from None
    return ray
