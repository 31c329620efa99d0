"""``poolkit cache info|prune|clear``: what the token-state cache holds, and removing it."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "cache",
        help="show or remove the token states compare (and embed --cache) keep",
        description="The token-state cache (docs/cache.md): `info` lists its size, entries "
        "and models; `prune --max-size SIZE` removes the least recently used states until it "
        "fits; `clear` removes them all. Other cached files (ONNX exports, tokenizers) stay.",
    )
    parser.add_argument("action", choices=["info", "prune", "clear"],
                        help="info: what the cache holds; prune: shrink it to --max-size; "
                        "clear: remove every token state")  # fmt: skip
    parser.add_argument("--cache-dir", default=None, metavar="DIR",
                        help="the cache root (default: $POOLKIT_CACHE, else ~/.cache/poolkit)")  # fmt: skip
    parser.add_argument("--max-size", default=None, metavar="SIZE",
                        help="prune: the size to shrink to, e.g. 500M, 20G")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="info: one JSON object")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from poolkit._cache import cache_root
    from poolkit._errors import count
    from poolkit.cli._cache_args import human
    from poolkit.errors import InputError
    from poolkit.token_store import TokenStore, clear_store, parse_size, store_usage

    root = cache_root(args.cache_dir)
    if (args.max_size is not None) != (args.action == "prune"):
        raise InputError(arg="--max-size", expected="given with prune, and only there",
                         got=args.max_size or f"none with {args.action}",
                         fix="poolkit cache prune --max-size 10G")  # fmt: skip
    if args.json and args.action != "info":
        raise InputError(arg="--json", expected="given with info", got=args.action,
                         fix="Drop --json.")  # fmt: skip
    if args.action == "prune":
        size = parse_size(args.max_size, "--max-size")
        removed = TokenStore(root, max_bytes=size).evict()
        left = store_usage(root)
        print(f"poolkit: removed {human(removed)} of token states; {human(left.bytes)} in "
              f"{count(left.shards, 'shard')} left in {root}")  # fmt: skip
        return 0
    if args.action == "clear":
        removed = clear_store(root)
        print(f"poolkit: removed {human(removed)} of token states from {root}")
        return 0
    usage = store_usage(root)
    if args.json:
        print(json.dumps({"root": str(root), "shards": usage.shards, "bytes": usage.bytes,
                          "namespaces": usage.namespaces}, indent=2))  # fmt: skip
        return 0
    print(f"token states in {root}: {human(usage.bytes)} in {count(usage.shards, 'shard')}, "
          f"{count(len(usage.namespaces), 'model setting')}")  # fmt: skip
    for ns in usage.namespaces:
        what = ", ".join(
            f"{k} {ns[k]}" for k in ("backend", "device", "max_length", "long_text", "layers",
                                     "stored_dtype") if ns.get(k) is not None
        )  # fmt: skip
        print(
            f"  {ns.get('model', '?')}: {human(ns['bytes'])}, {count(ns['shards'], 'shard')} "
            f"({what})"
        )
    return 0
