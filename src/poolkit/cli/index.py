"""``poolkit index``: embed a corpus into a Qdrant index (an embedded Qdrant Edge shard)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from poolkit.cli._common import _MODEL_HELP, add_input_format
from poolkit.cli._output_args import add_fit_source
from poolkit.cli._rows import add_row_arguments

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "index",
        help="embed a corpus into a Qdrant index (an embedded shard, no server)",
        description="Embed every text of INPUT with each --recipe and upsert them into the "
        "Qdrant Edge index at --to (created, or added to where it holds the same model and "
        "recipes): one named vector per recipe, the user's ids kept (poolkit search finds "
        "them). Dense recipes, float32 (with /DIMS and fitted transforms, --fit); "
        "docs/search-index.md.",
    )
    parser.add_argument("input", metavar="INPUT",
                        help=".txt, .jsonl, .csv, .tsv, .parquet, or a BEIR folder (its "
                        "corpus.jsonl: title and text, ids from _id)")  # fmt: skip
    parser.add_argument("--to", required=True, metavar="DIR", help="the index folder")
    parser.add_argument("--recipe", "-r", nargs="+", action="extend", default=None,
                        metavar="NAME", help="a row name of poolkit compare, e.g. mean, "
                        "mean/256, mean/pca128 (with --fit); several give several named "
                        "vectors (default: the model's pooling)")  # fmt: skip
    add_input_format(parser)  # --text-column, --input-format
    add_row_arguments(parser)  # --id-column, --keep-columns
    add_fit_source(parser)  # --fit FILE
    parser.add_argument("--model", "-m", default=None, help=_MODEL_HELP)
    parser.add_argument("--max-length", type=int, default=None, metavar="N",
                        help="tokens per text, special tokens included (default: the model's)")  # fmt: skip
    parser.add_argument("--prompt-name", default=None, metavar="NAME",
                        help="the documents' prompt (default: the model's default prompt)")  # fmt: skip
    parser.add_argument("--query-prompt-name", default=None, metavar="NAME",
                        help="the queries' prompt, recorded for poolkit search (default: the "
                        "model's default prompt)")  # fmt: skip
    parser.add_argument("--part-size", type=int, default=4096, metavar="N",
                        help="texts embedded and upserted at a time (default: 4096)")  # fmt: skip
    parser.add_argument("--quiet", "-q", action="store_true", help="no summary line")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from poolkit.cli._common import positive
    from poolkit.cli._flags import flagged
    from poolkit.cli._rows import beir_input, keep_list
    from poolkit.errors import PoolkitError
    from poolkit.index import index_texts
    from poolkit.io.readers import read_rows

    positive(args.part_size, "--part-size")
    positive(args.max_length, "--max-length")
    start = time.perf_counter()
    args.output = args.to  # keep_list's check reads it (a folder: every field can be kept)
    title = beir_input(args)
    keep = keep_list(args)
    texts: list[str] = []
    ids: list[Any] = []
    kept: list[dict[str, Any]] = []
    own = False  # the input has ids (else row numbers: refused when adding to an index)
    for part in read_rows(args.input, text_column=args.text_column, fmt=args.input_format,
                          id_column=args.id_column or "auto", keep_columns=keep,
                          title_column=title):  # fmt: skip
        first = len(texts)
        texts += part.texts
        ids += part.ids if part.ids is not None else range(first, first + len(part.texts))
        own = own or part.ids is not None
        kept += [{n: part.kept[n][k] for n in keep} for k in range(len(part.texts))]
    flags = {"target": "--to", "recipe": "--recipe", "fit": "--fit", "ids": "--id-column",
             "model": "--model",
             "prompt_name": "--prompt-name", "query_prompt_name": "--query-prompt-name",
             "max_length": "--max-length"}  # fmt: skip
    try:
        record = index_texts(args.to, texts, ids if own else None, model=args.model,
                             recipe=args.recipe,
                             fit=args.fit, prompt_name=args.prompt_name,
                             query_prompt_name=args.query_prompt_name,
                             payloads=kept if keep else None, part_size=args.part_size,
                             max_length=args.max_length)  # fmt: skip
    except PoolkitError as e:
        raise flagged(e, flags) from None
    if not args.quiet:
        print(f"poolkit: indexed {len(texts)} texts into {args.to} ({', '.join(record.vectors)}; "
              f"{record.model}) in {time.perf_counter() - start:.1f} s", file=sys.stderr)  # fmt: skip
    return 0
