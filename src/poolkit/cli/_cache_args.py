"""--cache, --cache-dir, --cache-size, --cache-layers, --cache-dtype: the token-state cache
(:mod:`poolkit.state_cache`) of a command's forward passes, checked before any model loads."""

from __future__ import annotations

import argparse
from typing import Any

from poolkit.errors import InputError

__all__ = [
    "add_cache_arguments",
    "cache_line",
    "cache_record",
    "cache_settings",
    "human",
    "open_cache",
]

_DETAILS = ("cache_dir", "cache_size", "cache_layers", "cache_dtype")


def add_cache_arguments(parser: argparse.ArgumentParser, *, default: bool) -> None:
    """The cache flags, the cache on by ``default`` (``compare``) or off (``embed``)."""
    parser.add_argument("--cache", action=argparse.BooleanOptionalAction, default=default,
                        help="keep the model's token states on disk and read them back when "
                        "the same texts meet the same model and settings again (docs/cache.md; "
                        f"default: {'on' if default else 'off'})")  # fmt: skip
    parser.add_argument("--cache-dir", default=None, metavar="DIR",
                        help="where the token states live (default: $POOLKIT_CACHE, else "
                        "~/.cache/poolkit)")  # fmt: skip
    parser.add_argument("--cache-size", default=None, metavar="SIZE",
                        help="the most the token states may take, least recently used "
                        "removed first, e.g. 500M, 20G (default: 20G)")  # fmt: skip
    parser.add_argument("--cache-layers", choices=["used", "all"], default=None,
                        help="used: the layers this run pools; all: every layer, so a later "
                        "layer mix reads instead of encoding (torch backend) (default: used)")  # fmt: skip
    parser.add_argument("--cache-dtype", choices=["exact", "float16"], default=None,
                        help="exact: as the model gave them, bit-identical reads; float16: "
                        "half the space, not exact (default: exact)")  # fmt: skip


def cache_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`~poolkit.state_cache.open_state_cache` the flags ask
    for (checked by :func:`open_cache`)."""
    from poolkit.token_store import DEFAULT_MAX_BYTES, parse_size

    size = DEFAULT_MAX_BYTES if args.cache_size is None else parse_size(args.cache_size)
    return {"cache_dir": args.cache_dir, "max_size": size, "layers": args.cache_layers or "used",
            "dtype": args.cache_dtype or "exact"}  # fmt: skip


def open_cache(args: argparse.Namespace) -> Any:
    """One :class:`~poolkit.state_cache.StateCache` for the run (set it on each encoder's
    ``state_cache``); None with the cache off, refusing its detail flags then in one line."""
    given = [f"--{name.replace('_', '-')}" for name in _DETAILS if getattr(args, name) is not None]
    if not args.cache:
        if given:
            raise InputError(arg=given[0], expected="given only with the cache on (--cache)",
                             got="--no-cache" if args.cache is False else "the cache off",
                             fix="Add --cache, or drop the flag.")  # fmt: skip
        return None
    backend = getattr(args, "backend", "torch")
    if args.cache_layers == "all" and backend != "torch":
        raise InputError(arg="--cache-layers", expected="used with --backend " + backend +
                         " (it gives the last layer only)", got="all",
                         fix="Drop --cache-layers, or use --backend torch.")  # fmt: skip
    from poolkit.state_cache import open_state_cache

    return open_state_cache(**cache_settings(args))


def cache_record(cache: Any) -> dict[str, Any]:
    """The JSON record of what the cache did (``{"enabled": false}`` without one)."""
    if cache is None:
        return {"enabled": False}
    return {"enabled": True, "dir": str(cache.store.root), "layers": cache.layers,
            "dtype": cache.dtype, **cache.counts.as_dict()}  # fmt: skip


def cache_line(cache: Any) -> str | None:
    """One line for the summary: texts read from the cache and encoded, with their times."""
    if cache is None:
        return None
    c = cache.counts
    return (
        f"token states: {c.texts_read} texts read from the cache ({c.read_seconds:.1f} s), "
        f"{c.texts_encoded} encoded ({c.encode_seconds:.1f} s); {cache.store.root}"
    )


def human(n: int) -> str:
    """``n`` bytes in B, KiB, MiB, GiB or TiB, three significant figures."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.3g} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    return f"{value:.3g} TiB"
