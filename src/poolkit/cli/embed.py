"""``poolkit embed INPUT -o OUTPUT``: one vector per text, written atomically."""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import warnings
from typing import Any

import numpy as np

from poolkit.cli._common import add_common, positive, progress_bar, text_chunks
from poolkit.cli._ray_engine import add_arguments as add_engine_arguments
from poolkit.cli._ray_engine import dispatch as dispatch_engine

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "embed",
        help="embed the texts of a file",
        description="Embed every text of INPUT and write the vectors to OUTPUT, in input "
        "order, with the model's intended pooling unless --strategy says otherwise.",
    )
    parser.add_argument("input", metavar="INPUT",
                        help=".txt (one text per line), .jsonl, .csv, .tsv, .parquet, or - for stdin")  # fmt: skip
    parser.add_argument("-o", "--output", required=True, metavar="OUTPUT",
                        help=".npy (float32 matrix), .parquet (id + one column per strategy), .jsonl")  # fmt: skip
    parser.add_argument("--strategy", "-s", nargs="+", action="extend", default=None,
                        metavar="S", help="e.g. mean, cls, cls+mean; several give several columns")  # fmt: skip
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                        help="L2-normalise (default: as the model does)")  # fmt: skip
    parser.add_argument("--text-column", default=None, metavar="C",
                        help="field/column with the text (default: 'text')")  # fmt: skip
    parser.add_argument("--input-format", default=None,
                        choices=["txt", "jsonl", "csv", "tsv", "parquet"],
                        help="format of INPUT (default: from its extension; stdin: txt)")  # fmt: skip
    parser.add_argument(
        "--layers",
        default=None,
        help="layers to mix: last4, first_last, -2, or -1,-2 (default: last)",
    )
    parser.add_argument("--exclude-special", action="store_true",
                        help="pool without [CLS]/[SEP]-like tokens")  # fmt: skip
    parser.add_argument("--chunk-size", type=int, default=4096, metavar="N",
                        help="texts read, embedded and written at a time (default: 4096)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    add_common(parser)
    add_engine_arguments(parser)  # --engine ray, --address, --workers, --cpus-per-worker
    parser.set_defaults(func=run)
    return parser


def parse_layers(value: str | None) -> Any:
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        return value
    return numbers[0] if len(numbers) == 1 else numbers


def run(args: argparse.Namespace) -> int:
    if (status := dispatch_engine(args)) is not None:  # --engine ray
        return status
    from poolkit.embed import TruncationWarning, embed, get_encoder
    from poolkit.io.writers import check_output, open_writer
    from poolkit.sequence import parse_sequence_strategy

    positive(args.chunk_size, "--chunk-size")
    positive(args.batch_tokens, "--batch-tokens")
    positive(args.max_length, "--max-length")
    for name in args.strategy or []:
        parse_sequence_strategy(name)
    check_output(args.output, args.strategy or ["intended"], args.overwrite)

    start = time.perf_counter()
    # Read the first chunk before loading the model: input errors surface in a moment.
    chunks = text_chunks(args, args.chunk_size)
    first = next(chunks)
    encoder = get_encoder(args.model, device=args.device, dtype=args.dtype,
                          max_length=args.max_length)  # fmt: skip
    names = list(args.strategy or [encoder.info.pooling])
    layers = parse_layers(args.layers)
    done = truncated = 0
    dims: dict[str, int] = {}
    with (
        progress_bar(args) as bar,
        open_writer(args.output, names, overwrite=args.overwrite) as out,
    ):
        for chunk in itertools.chain([first], chunks):
            with warnings.catch_warnings():
                # Truncation is reported once, in the summary line.
                warnings.simplefilter("ignore", TruncationWarning)
                result, stats = embed(
                    chunk, encoder, names, normalize=args.normalize, layers=layers,
                    exclude_special=args.exclude_special, long_text=args.long_text,
                    max_batch_tokens=args.batch_tokens, return_stats=True, progress=bar.update,
                )  # fmt: skip
            out.write(np.arange(done, done + len(chunk)), result)
            done += len(chunk)
            truncated += stats.num_truncated
            dims = stats.dims
    seconds = time.perf_counter() - start
    if not args.quiet:
        shape = ", ".join(f"{k}={v}" for k, v in dims.items())
        note = ""
        if truncated:
            note = (f" (longer than {encoder.max_length} tokens; --long-text chunk keeps "
                    "all tokens)")  # fmt: skip
        print(
            f"poolkit: {done} texts -> {args.output} [{shape}] in {seconds:.1f} s, "
            f"{done / max(seconds, 1e-9):.1f} texts/s, {truncated} truncated{note}",
            file=sys.stderr,
        )
    return 0
