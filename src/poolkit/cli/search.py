"""``poolkit search``: the nearest documents of queries in a ``poolkit index``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from poolkit.cli._common import add_input_format

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "search",
        help="search a poolkit index",
        description="Embed each query by the route the index recorded (its model, the "
        "queries' prompt, the recipe and fit of the vector searched) and print the k "
        "nearest ids with their cosine scores: a TREC run file (qid Q0 docid rank score "
        "run; what pytrec_eval and ranx read) or JSON Lines (-o FILE.jsonl).",
    )
    parser.add_argument("index", metavar="DIR", help="a folder poolkit index built")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--query", action="append", default=None, metavar="TEXT",
                        help="a query (repeatable; ids 1, 2, ...)")  # fmt: skip
    source.add_argument("--queries", default=None, metavar="FILE",
                        help="queries, read like embed's INPUT (BEIR queries.jsonl: ids "
                        "from _id)")  # fmt: skip
    add_input_format(parser)  # --text-column, --input-format (of --queries)
    parser.add_argument("--id-column", default=None, metavar="C",
                        help="--queries' field with each query's id (default: id or _id, "
                        "else the row number)")  # fmt: skip
    parser.add_argument("--using", default=None, metavar="NAME",
                        help="the vector to search (default: the index's only one)")  # fmt: skip
    parser.add_argument("-k", type=int, default=10, help="results per query (default: 10)")
    parser.add_argument("--approximate", action="store_true",
                        help="Qdrant's HNSW search (default: exact, as compare ranks)")  # fmt: skip
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="a TREC run file (.tsv, .trec, .txt), JSON Lines (.jsonl), or - "
                        "for the TREC run on stdout (default)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from poolkit._errors import already_exists
    from poolkit.cli._common import positive
    from poolkit.cli._flags import flagged
    from poolkit.errors import InputError, PoolkitError
    from poolkit.index import search

    positive(args.k, "-k")
    out = None if args.output == "-" else Path(args.output)
    if out is not None:
        if out.suffix.lower() not in (".tsv", ".trec", ".txt", ".jsonl"):
            raise InputError(arg="-o", expected="a .tsv, .trec, .txt (TREC run) or .jsonl file",
                             got=args.output)  # fmt: skip
        if out.exists() and not args.overwrite:
            raise InputError(already_exists(out, fix="--overwrite"))
    if args.queries is None and (args.text_column or args.input_format or args.id_column):
        raise InputError(arg="--text-column" if args.text_column else "--input-format"
                         if args.input_format else "--id-column", expected="given with "
                         "--queries FILE", got="--query TEXT", fix="Drop it.")  # fmt: skip
    ids, texts = _queries(args)
    try:
        found = search(args.index, texts, using=args.using, k=args.k, exact=not args.approximate)
    except PoolkitError as e:
        raise flagged(e, {"using": "--using", "k": "-k", "target": "DIR", "fit": "DIR"}) from None
    jsonl = out is not None and out.suffix.lower() == ".jsonl"
    lines = []
    for qid, hits in zip(ids, found, strict=True):
        for rank, (doc, score) in enumerate(hits, 1):
            if jsonl:
                lines.append(json.dumps({"query_id": qid, "id": doc, "rank": rank,
                                         "score": score}))  # fmt: skip
            else:
                lines.append(f"{qid} Q0 {doc} {rank} {score:.9g} poolkit")
    text = "".join(line + "\n" for line in lines)
    if out is None:
        sys.stdout.write(text)
    else:
        from poolkit.io.atomic import atomic_write

        data = text.encode()
        atomic_write(out, lambda f: f.write(data), size=len(data))
    return 0


def _queries(args: argparse.Namespace) -> tuple[list[Any], list[str]]:
    """Each query's id and text: --query TEXT (ids 1, 2, ...) or --queries FILE."""
    if args.queries is None:
        return [str(k) for k in range(1, len(args.query) + 1)], list(args.query)
    from poolkit.io.readers import read_rows

    ids: list[Any] = []
    texts: list[str] = []
    for part in read_rows(args.queries, text_column=args.text_column, fmt=args.input_format,
                          id_column=args.id_column or "auto"):  # fmt: skip
        first = len(texts)
        texts += part.texts
        ids += part.ids if part.ids is not None else [str(k + 1) for k in range(first, len(texts))]
    return ids, texts
