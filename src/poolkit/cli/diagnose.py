"""``poolkit diagnose TEXTS VECTORS --model M``: which pooling made these vectors.

VECTORS is a file some system wrote for TEXTS (``.npy``, ``.npz``, Parquet, JSON Lines,
JSON), or a sentence-transformers folder (run here on TEXTS); ``--onnx FILE`` runs an ONNX
graph and ``--url`` asks a running TEI ``/embed`` or OpenAI-compatible ``/v1/embeddings``
server instead. Prints the verdict and the table (``--json``: one JSON object); ``-o FILE``
writes that JSON to FILE. Nothing else is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from poolkit._errors import value_error
from poolkit.cli._cache_args import add_cache_arguments, cache_line, open_cache
from poolkit.cli._common import add_common, add_input_format, progress_bar

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "diagnose",
        help="say which pooling made some vectors, and whether it is the model's own",
        description="Compute every pooling candidate of the model from one forward pass over "
        "TEXTS and report the one that reproduces the vectors (per-row cosine, rows matching "
        "to --tol), or the nearest and what differs; then a one-line verdict against the "
        "model's intended recipe, with the fix. The vectors come from VECTORS (a file, or a "
        "sentence-transformers folder run on TEXTS), --onnx or --url.",
    )
    parser.add_argument("texts", metavar="TEXTS", help="the texts the vectors were made for "
                        "(.txt, .jsonl, .csv, .tsv, .parquet)")  # fmt: skip
    parser.add_argument("vectors", metavar="VECTORS", nargs="?", default=None,
                        help="their vectors: .npy, .npz, .parquet, .jsonl, .json, or a "
                        "sentence-transformers folder to run")  # fmt: skip
    parser.add_argument("--model", "-m", default=None,
                        help="the model the vectors should come from (default: "
                        "sentence-transformers/all-MiniLM-L6-v2)")  # fmt: skip
    parser.add_argument("--onnx", metavar="FILE", default=None,
                        help="run this ONNX graph (token ids in, one vector per text out) "
                        "on TEXTS instead of reading VECTORS")  # fmt: skip
    parser.add_argument("--url", default=None,
                        help="ask this server for the vectors: TEI's .../embed or an "
                        "OpenAI-compatible .../v1/embeddings")  # fmt: skip
    parser.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                        help="an HTTP header for --url, e.g. 'Authorization: Bearer TOKEN' "
                        "(repeatable; default: none)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S",
                        help="seconds to wait for each answer of --url (default: 30)")  # fmt: skip
    parser.add_argument("--retries", type=int, default=2, metavar="N",
                        help="tries again after a refused connection, timeout, 429 or 5xx "
                        "(default: 2)")  # fmt: skip
    parser.add_argument("--served-model", default=None, metavar="NAME",
                        help="the 'model' field of /v1/embeddings requests (default: 'default')")  # fmt: skip
    parser.add_argument("--column", default=None, metavar="C",
                        help="the vector column of a Parquet or JSON Lines VECTORS file "
                        "(default: the only one)")  # fmt: skip
    parser.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                        help="a prompt of your own to try beside the model's (repeatable; default: "
                        "only the model's)")  # fmt: skip
    parser.add_argument("--tol", type=float, default=1e-4,
                        help="a row matches within this relative distance (default: 1e-4)")  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the verdict is OK (MISMATCH or NO MATCH), so a CI "
                        "step fails on it; the report is printed as usual")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="also write the JSON report to FILE")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    parser.add_argument("--batch-tokens", type=int, default=None, metavar="N",
                        help="token budget per forward batch")  # fmt: skip
    add_input_format(parser)
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_cache_arguments(parser, default=True)
    add_common(parser, model=False)  # --debug
    parser.set_defaults(func=run)
    return parser


def _headers(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            value_error("--header", "'NAME: VALUE'", repr(item))
        out[name.strip()] = value.strip()
    return out


def _check(args: argparse.Namespace) -> None:
    """Every flag checked before anything loads or runs."""
    sources = [x for x in (args.vectors, args.onnx, args.url) if x is not None]
    if len(sources) != 1:
        value_error("VECTORS", "given, or --onnx or --url instead (one of the three)",
                    f"{len(sources)} of them")  # fmt: skip
    if args.header and args.url is None:
        value_error("--header", "used with --url", f"{len(args.header)} header(s) without it")
    if args.url is not None:
        from poolkit.diagnosis.sources import server_kind

        server_kind(args.url)
        from poolkit.cli._common import require_extra

        require_extra("--url", "httpx", "httpx", "diagnose")
    if args.timeout <= 0:
        value_error("--timeout", "a positive number of seconds", args.timeout)
    if args.retries < 0:
        value_error("--retries", "0 or more", args.retries)
    if args.column is not None and args.vectors is None:
        value_error("--column", "used with a VECTORS file", "--onnx or --url")
    if args.output is not None:
        out = Path(args.output)
        if out.exists() and not args.overwrite:
            from poolkit._errors import already_exists
            from poolkit.errors import InputError

            raise InputError(already_exists(out, fix="--overwrite"))
        if not out.parent.is_dir():
            value_error("-o", "a file in an existing directory", repr(args.output))


def run(args: argparse.Namespace) -> int:
    from poolkit.cli._flags import DIAGNOSE, flagged
    from poolkit.diagnosis import diagnose
    from poolkit.diagnosis.sources import (
        folder_vectors,
        onnx_vectors,
        read_vectors,
        server_vectors,
    )
    from poolkit.embedding import get_encoder
    from poolkit.errors import PoolkitError
    from poolkit.io.readers import read_all

    _check(args)
    cache = open_cache(args)
    encoder = None
    try:
        texts = read_all(args.texts, text_column=args.text_column, fmt=args.input_format)
        if args.vectors is not None and not Path(args.vectors).is_dir():
            vectors = read_vectors(args.vectors, args.column)  # before the model loads
        if args.url is not None:  # asked before the model loads: a server error comes first
            vectors = server_vectors(args.url, texts, headers=_headers(args.header),
                                     timeout=args.timeout, retries=args.retries,
                                     served_model=args.served_model)  # fmt: skip
        encoder = get_encoder(args.model, device=args.device, max_batch_tokens=args.batch_tokens)
        encoder.state_cache = cache
        if args.onnx is not None:
            vectors = onnx_vectors(args.onnx, texts, encoder)
        elif args.url is None and Path(args.vectors).is_dir():
            vectors = folder_vectors(args.vectors, texts)
        with progress_bar(args) as bar:
            found = diagnose(texts, vectors, encoder, prompts=args.prompt, tol=args.tol,
                             progress=bar.update)  # fmt: skip
    except PoolkitError as e:
        raise flagged(e, DIAGNOSE) from None
    finally:
        if encoder is not None:  # the loaded encoder outlives the command
            encoder.state_cache = None
    if cache is not None and not args.quiet:
        print(f"poolkit: {cache_line(cache)}", file=sys.stderr)
    report = found.to_json()
    if args.output is not None:
        from poolkit.io.atomic import atomic_write

        data = (json.dumps(report, indent=2) + "\n").encode("utf-8")
        atomic_write(Path(args.output), lambda f: f.write(data), size=len(data))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(found.to_text())
    return 1 if args.check and not found.verdict.startswith("OK") else 0
