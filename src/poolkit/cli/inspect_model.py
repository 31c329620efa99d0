"""``poolkit inspect --model MODEL``: what a model is and how it is meant to be pooled."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from poolkit.cli._common import add_model_or_positional, model_given

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "inspect",
        help="show a model's architecture and intended pooling",
        description="Print architecture, layers, hidden size, max length, tokenizer, the "
        "intended pooling and where it was read from, and normalisation. Loads no weights.",
    )
    add_model_or_positional(parser)  # --model, or MODEL (the old spelling)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")  # fmt: skip
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from poolkit.model_folder import model_info

    info = model_info(model_given(args))
    if args.json:
        data = asdict(info)
        data["path"] = str(info.path)
        print(json.dumps(data, indent=2))
        return 0
    rows = info.describe()
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if info.pooling_is_guess and not info.is_multivector_folder:
        print(f"{'':<{width}}  ! no file states the pooling: check the model card, or pass "
              "--recipe.")  # fmt: skip
    return 0
