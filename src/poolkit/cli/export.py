"""``poolkit export --model MODEL -o DIR``: the pooling you chose, as a folder any runtime
loads."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from poolkit.cli._common import add_common, add_model_or_positional, model_given
from poolkit.cli._output_args import add_fit_source, add_range_sources

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "export",
        help="write a model with a chosen pooling as a sentence-transformers or ONNX folder",
        description="Write the model pooled by a recipe (default: its intended pooling, or the "
        "top row of --from-compare) as a folder that sentence-transformers, or ONNX Runtime "
        "with only a tokenizer, loads. The folder appears only once it is complete and checked.",
    )
    add_model_or_positional(parser)  # --model, or MODEL (the old spelling)
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write")
    parser.add_argument(
        "--recipe",
        "-r",
        default=None,
        metavar="NAME",
        help="a row name of poolkit compare, e.g. mean, cls+mean, "
        "mean_no_special@last4, splade/top64, multivector:tokens/pool2 (default: the model's "
        "intended pooling)",
    )
    parser.add_argument(
        "--format",
        default="sentence-transformers",
        choices=["sentence-transformers", "onnx"],
        help="sentence-transformers: a SentenceTransformer folder (SparseEncoder for a "
        "sparse recipe, MultiVectorEncoder for a multivector: one); onnx: one graph with "
        "pooling inside, plus tokenizer.json (default: sentence-transformers)",
    )
    parser.add_argument(
        "--quantize",
        choices=["int8"],
        default=None,
        help="int8: dynamic int8 quantisation of the ONNX graph (--format onnx, dense recipes)",
    )
    parser.add_argument(
        "--from-compare",
        default=None,
        metavar="JSON",
        help="a poolkit compare --json file: export its top row (a fitted row with the fit "
        "file it names, unless --fit) and cite its figure in the model card",
    )
    add_range_sources(parser, "an int8/uint8 recipe (--format onnx): the ranges the graph holds, "
                      "from every non-blank text, as poolkit embed --calibrate takes them")  # fmt: skip
    parser.add_argument("--text-column", default=None, metavar="C",
                        help="--calibrate FILE's field/column with the text (default: 'text', "
                        "or the only column)")  # fmt: skip
    add_fit_source(parser)  # --fit FILE: a fitted recipe's transform, as embed takes it
    parser.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")
    parser.add_argument("--quiet", "-q", action="store_true", help="no summary line")
    add_common(parser, model=False)  # --debug
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import json

    from poolkit.cli._flags import EXPORT, flagged
    from poolkit.deploy import RECORD, export
    from poolkit.errors import PoolkitError
    from poolkit.fitted import load_fits

    model = model_given(args)
    # A library message about `model` names the spelling given: MODEL as before, unless --model.
    flags = {**EXPORT, "model": "--model"} if args.model is not None else EXPORT
    flags = {**flags, "fit": "--fit"}
    try:
        calibration = _calibration(args)
        fits = load_fits(args.fit)  # None: --from-compare's fitted row names its file
        out = export(
            model,
            args.output,
            recipe=args.recipe,
            format=args.format,
            quantize=args.quantize,
            overwrite=args.overwrite,
            from_compare=args.from_compare,
            calibration=calibration,
            fit=fits or None,
        )
    except PoolkitError as e:
        raise flagged(e, flags) from None  # library messages name arguments
    if not args.quiet:
        record = json.loads((out / RECORD).read_text(encoding="utf-8"))
        check = record.get("agreement", {}).get("summary")
        print(
            f"{out}: {record['recipe']} ({record['output_dim']} dims, "
            f"{'normalised' if record['normalize'] else 'not normalised'}) as "
            f"{record['format']}" + (f"; {check}" if check else ""),
            file=sys.stderr,
        )
    return 0


def _calibration(args: argparse.Namespace) -> Any:
    """``export``'s ``calibration`` from --ranges FILE (a Calibration) or --calibrate FILE
    (its non-blank texts, all of them, as ``poolkit embed --calibrate`` takes its ranges)."""
    from poolkit.cli._output_args import calibrate_file_texts, ranges_from_file
    from poolkit.errors import InputError
    from poolkit.recipe import Recipe

    if args.ranges is not None and args.calibrate is not None:
        raise InputError(arg="--ranges", expected="unset with --calibrate (both give int8 ranges)",
                         got=args.ranges, fix="Keep one.")  # fmt: skip
    if args.text_column is not None and args.calibrate is None:
        raise InputError(arg="--text-column", expected="given only with --calibrate FILE",
                         got=repr(args.text_column), fix="Drop --text-column.")  # fmt: skip
    if args.ranges is not None:
        # Without --recipe (--from-compare's top row): the file's one set of ranges.
        return ranges_from_file(args.ranges, args.recipe or "", Recipe.parse(args.recipe or "mean"))
    if args.calibrate is not None:
        texts = [t for part in calibrate_file_texts(args) for t in part]
        if not texts:
            raise InputError(arg="--calibrate", expected="a file with a non-blank text to take "
                             "ranges from", got=args.calibrate,
                             fix="Name a file with some of your texts.")  # fmt: skip
        return texts
    return None
