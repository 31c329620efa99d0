"""``poolkit inspect --model MODEL``: what a model is and how it is meant to be pooled."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from poolkit._errors import value_error
from poolkit.model_folder import DEFAULT_MODEL

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "inspect",
        help="show a model's architecture and intended pooling",
        description="Print architecture, layers, hidden size, max length, tokenizer, the "
        "intended pooling and where it was read from, and normalisation. Loads no weights.",
    )
    parser.add_argument("--model", "-m", default=None,
                        help=f"model directory or hub id (default: {DEFAULT_MODEL})")  # fmt: skip
    # The old spelling, as a positional: still accepted (not both).
    parser.add_argument("model_positional", nargs="?", default=None, metavar="MODEL",
                        help="the same as --model (the old spelling)")  # fmt: skip
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")  # fmt: skip
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from poolkit.model_folder import model_info

    if args.model is not None and args.model_positional is not None:
        value_error("--model", "given once", f"both --model {args.model} and MODEL "
                    f"{args.model_positional}", "Drop MODEL (the old spelling).")  # fmt: skip
    info = model_info(args.model if args.model is not None else args.model_positional)
    if args.json:
        data = asdict(info)
        data["path"] = str(info.path)
        print(json.dumps(data, indent=2))
        return 0
    rows = info.describe()
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if info.pooling_is_guess:
        print(f"{'':<{width}}  ! no file states the pooling: check the model card, or pass "
              "--strategy.")  # fmt: skip
    return 0
