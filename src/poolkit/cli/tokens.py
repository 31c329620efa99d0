"""``poolkit tokens``: each text's tokens, character offsets and vectors as JSON lines."""

from __future__ import annotations

import argparse
from typing import Any

from poolkit.cli._common import add_common, add_texts, positives, quiet_truncation, text_parts
from poolkit.cli._jsonout import add_output_arguments, json_lines, rounded

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "tokens",
        help="token vectors of texts, as JSON lines",
        description="Print one JSON object per text: its tokens (special tokens removed), "
        "their half-open character offsets [start, end) and their vectors.",
    )
    add_texts(parser, "file of texts (as for `poolkit embed`), or - for stdin",
              "a text to tokenize (repeatable), instead of INPUT")  # fmt: skip
    add_output_arguments(parser, "tokens and offsets")  # -o, --overwrite, --no-vectors, ...
    add_common(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from poolkit.embedding import embed_tokens, get_encoder

    positives(args, "--max-length", "--batch-tokens")
    encoder = get_encoder(args.model, device=args.device, dtype=args.dtype,
                          max_length=args.max_length)  # fmt: skip
    row = 0
    with json_lines(args.output, args.overwrite) as write, quiet_truncation(args):
        for part in text_parts(args, 1024):
            for text, tv in zip(part, embed_tokens(part, encoder, long_text=args.long_text,
                                                   max_batch_tokens=args.batch_tokens),
                                strict=True):  # fmt: skip
                obj: dict[str, Any] = {"id": row, "text": text, "tokens": tv.tokens,
                                       "offsets": tv.offsets.tolist()}  # fmt: skip
                if not args.no_vectors:
                    obj["vectors"] = rounded(tv.vectors, args.decimals)
                write(obj)
                row += 1
    return 0
