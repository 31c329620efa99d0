"""``poolkit spans``: vectors of character spans in texts, as JSON lines.

Input: ``--text T --span START:END ...`` (half-open character offsets, like
``text[START:END]``), or a JSON-lines file with ``{"text": ..., "spans": [[s, e], ...]}``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from poolkit._errors import value_error
from poolkit.cli._common import add_common, add_texts, positives, quiet_truncation
from poolkit.cli._jsonout import add_output_arguments, json_lines, rounded
from poolkit.errors import InputError
from poolkit.io.readers import read_records

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "spans",
        help="span vectors from character spans, as JSON lines",
        description="Print one JSON object per text with, for each character span, its "
        "inclusive token span, its tokens and its vector.",
    )
    add_texts(parser, 'JSON lines: {"text": ..., "spans": [[start, end], ...]}',
              "one text, instead of INPUT", many=False)  # fmt: skip
    parser.add_argument("--span", action="append", default=None, metavar="START:END",
                        help="half-open character span of --text (repeatable)")  # fmt: skip
    parser.add_argument("--recipe", "-r", default=None, metavar="RECIPE",
                        help="a span-level recipe, e.g. span:endpoints, span:mean@last4, "
                        "span:x,y,x*y (default: span:endpoints; see docs/recipes.md)")  # fmt: skip
    parser.add_argument("--strategy", "-s", default=None,
                        help="shorthand for --recipe span:STRATEGY: endpoints (2H), mean, max, "
                        "attention, diff_sum, or e.g. x,y,x*y")  # fmt: skip
    add_output_arguments(parser, "spans, token spans and tokens")  # -o, --overwrite, ...
    add_common(parser)
    parser.set_defaults(func=run)
    return parser


def _parse_span(value: str) -> tuple[int, int]:
    try:
        start, end = (int(x) for x in value.split(":"))
    except ValueError:
        raise InputError(
            arg="--span", expected="START:END (character offsets, e.g. 11:20)", got=repr(value)
        ) from None
    return start, end


def _records(args: argparse.Namespace) -> Iterator[tuple[str, list[tuple[int, int]]]]:
    if args.text is not None:
        if not args.span:
            value_error("--span", "given at least once (START:END) with --text", "none")
        yield args.text, [_parse_span(s) for s in args.span]
        return
    if args.input is None:
        value_error("INPUT", "a file, or --text given with --span", "neither")
    # poolkit's one record reader: the same decoding (UTF-8, BOM, NUL) as embed and compare.
    _, records = read_records(args.input, "jsonl")
    for where, obj in records:
        number = where.rsplit(":", 1)[1]
        if not isinstance(obj.get("text"), str) or not isinstance(obj.get("spans"), list):
            raise InputError(where=f"{args.input}: line {number}", expected='{"text": str, '
                             '"spans": [[start, end], ...]}', got="got other fields")  # fmt: skip
        try:
            spans = [(int(a), int(b)) for a, b in obj["spans"]]
        except (TypeError, ValueError):
            raise InputError(where=f"{args.input}: line {number}", expected="spans as [start, end] "
                             "integer pairs", got=f"got {obj['spans']!r:.60}") from None  # fmt: skip
        yield obj["text"], spans


def run(args: argparse.Namespace) -> int:
    from poolkit.cli._flags import flagged
    from poolkit.embedding import embed_spans, get_encoder
    from poolkit.recipe import Recipe

    positives(args, "--max-length", "--batch-tokens")
    # --recipe (or --strategy, its shorthand) as a span-level recipe, before the model loads.
    if args.recipe is not None and args.strategy is not None:
        raise InputError(arg="-s/--strategy", expected="unset with --recipe (it names the "
                         "strategy itself)", got=repr(args.strategy),
                         fix=f"Drop it (e.g. --recipe span:{args.strategy}).")  # fmt: skip
    name = args.recipe if args.recipe is not None else f"span:{args.strategy or 'endpoints'}"
    flag = "--recipe" if args.recipe is not None else "--strategy"
    try:
        recipe = Recipe.parse(name, level="span")
    except ValueError as e:
        raise flagged(e, {"recipe": flag}) from None
    if recipe.level != "span":
        raise InputError(arg=flag, expected="a span-level recipe, e.g. span:endpoints or "
                         "span:mean@last4", got=f"{name!r}, a {recipe.level}-level one")  # fmt: skip
    records = list(_records(args))
    if not records:
        raise InputError(where=args.input, expected="texts", got="the input is empty")
    texts = [t for t, _ in records]
    char_spans = [s for _, s in records]
    encoder = get_encoder(args.model, device=args.device, dtype=args.dtype,
                          max_length=args.max_length)  # fmt: skip
    with quiet_truncation(args):
        vectors, token_spans = embed_spans(texts, char_spans, encoder, recipe=recipe,
                                           long_text=args.long_text, return_token_spans=True,
                                           max_batch_tokens=args.batch_tokens)  # fmt: skip
    with json_lines(args.output, args.overwrite) as write:
        for row, (text, spans) in enumerate(records):
            tokens = encoder.tokenizer.convert_ids_to_tokens(encoder.tokenizer.encode(text).ids)
            items = []
            for k, (start, end) in enumerate(spans):
                first, last = (int(x) for x in token_spans[row][k])
                item: dict[str, Any] = {"start": start, "end": end, "text": text[start:end],
                                        "token_start": first, "token_end": last,
                                        "tokens": tokens[first : last + 1]}  # fmt: skip
                if not args.no_vectors:
                    item["vector"] = rounded(vectors[row][k], args.decimals)
                items.append(item)
            write({"id": row, "text": text, "spans": items})
    return 0
