"""Installed package versions, read from package metadata: importing a package only to
ask its version costs seconds (torch, transformers)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from poolkit._version import __version__

__all__ = ["installed", "installed_versions"]


def installed(name: str) -> str | None:
    """The installed version of package ``name``; None when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def installed_versions(*names: str) -> dict[str, str | None]:
    """poolkit's version, then each package's (None if absent), in that order."""
    return {"poolkit": __version__, **{name: installed(name) for name in names}}
