"""The one place that imports Ray, so a missing extra fails with one clear line; and the
one shim over Ray's API differences between versions."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from poolkit._errors import missing_extra
from poolkit.errors import MissingDependencyError

__all__ = ["INSTALL_HINT", "RayNotInstalledError", "quiet_remote_args_notice", "require_ray"]

INSTALL_HINT = "pip install 'poolkit[ray]'"


class RayNotInstalledError(MissingDependencyError):
    """Ray Data is not installed; the message names the install command."""


def require_ray() -> ModuleType:
    """Return the ``ray`` module (with ``ray.data`` imported), or raise
    :class:`RayNotInstalledError` naming ``pip install 'poolkit[ray]'``."""
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise RayNotInstalledError(missing_extra("poolkit.ray", "Ray Data", "ray")) from e
    return ray


@contextmanager
def quiet_remote_args_notice() -> Iterator[None]:
    """Silence Ray's notice that ``max_restarts``-style keywords will move (Ray >= 2.60);
    they are still the documented way to set them on every Ray 2.x."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*is deprecated")
        yield
