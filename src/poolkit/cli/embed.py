"""``poolkit embed INPUT -o OUTPUT``: one vector per text, written atomically.

Work is committed chunk by chunk (``--chunk-size`` texts) to ``OUTPUT.poolkit-work/``
(:mod:`poolkit.io.checkpoint`); OUTPUT appears, complete, only at the end. After a crash,
``kill -9`` or Ctrl-C (exit status 130), the same command with ``--resume`` recomputes at
most the chunk that was in flight and writes the same bytes an uninterrupted run would.
Blank texts are kept as empty texts (one vector each, so row ids stay line-aligned) with a
warning; an input made only of blank texts is refused.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from poolkit.cli._common import add_common, positive, progress_bar, text_chunks
from poolkit.cli._ray_engine import add_arguments as add_engine_arguments
from poolkit.cli._ray_engine import dispatch as dispatch_engine
from poolkit.cli._recipe_args import intended_recipes, recipes_from_args

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
    parser.add_argument("--recipe", "-r", nargs="+", action="extend", default=None,
                        metavar="NAME", help="a row name of poolkit compare, e.g. mean, "
                        "mean_no_special, cls+mean@last4; several give several columns")  # fmt: skip
    parser.add_argument("--strategy", "-s", nargs="+", action="extend", default=None,
                        metavar="S", help="shorthand: e.g. mean, cls, cls+mean, with --layers and "
                        "--exclude-special; several give several columns")  # fmt: skip
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
    parser.add_argument("--backend", choices=["torch", "onnx"], default="torch",
                        help="runtime: torch, or onnx (ONNX Runtime, CPU; exported once, cached)")  # fmt: skip
    parser.add_argument("--quantize", choices=["int8"], default=None,
                        help="int8: dynamic int8 quantisation (with --backend onnx)")  # fmt: skip
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted job from OUTPUT.poolkit-work (same "
                        "command, same settings); finished chunks are not recomputed")  # fmt: skip
    add_common(parser)
    add_engine_arguments(parser)  # --engine ray, --address, --workers, --cpus-per-worker
    parser.set_defaults(func=run)
    return parser


def _settings(args: argparse.Namespace, encoder: Any, recipes: dict[str, Any]) -> dict[str, Any]:
    """Everything the vectors depend on: a resumed job must present the same."""
    import numpy
    import torch
    import transformers

    from poolkit import __version__
    from poolkit.io.checkpoint import model_fingerprint
    from poolkit.io.readers import input_format
    from poolkit.io.writers import output_format

    return {
        "model": encoder.info.reference,
        "model_files": model_fingerprint(encoder.info.path),
        "strategies": list(recipes),
        "recipes": [str(r) for r in recipes.values()],
        "normalize": [r.resolved_normalize(encoder.info.normalize) for r in recipes.values()],
        "long_text": args.long_text,
        "max_length": encoder.max_length,
        "batch_tokens": encoder.max_batch_tokens,
        "backend": args.backend,
        "quantize": args.quantize,
        "chunk_size": args.chunk_size,
        "input_format": input_format(args.input, args.input_format),
        "text_column": args.text_column,
        "output_format": output_format(args.output),
        "device": encoder.device,
        "dtype": args.dtype,
        "versions": {"poolkit": __version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": numpy.__version__},
    }  # fmt: skip


def _with_note(error: Exception, note: str) -> Exception:
    """The same kind of error with ``note`` appended (the CLI prints one line)."""
    try:
        return type(error)(f"{error} {note}")
    except Exception:
        return error


def run(args: argparse.Namespace) -> int:
    if (status := dispatch_engine(args)) is not None:  # --engine ray
        return status
    from poolkit.embed import check_inputs, embed_recipes, get_encoder
    from poolkit.io.checkpoint import Checkpoint, check_no_work_dir, texts_digest, work_dir_for
    from poolkit.io.readers import InputError
    from poolkit.io.writers import check_output

    positive(args.chunk_size, "--chunk-size")
    positive(args.batch_tokens, "--batch-tokens")
    positive(args.max_length, "--max-length")
    wanted, _ = recipes_from_args(args)
    output = Path(args.output)
    check_output(output, list(wanted) if wanted else ["intended"], True)
    if output.exists() and not args.overwrite:
        if args.resume and Checkpoint.finished(output):
            # Killed after publishing OUTPUT, before removing the work directory.
            shutil.rmtree(work_dir_for(output))
            print(f"poolkit: {output} was already complete; removed its work directory.",
                  file=sys.stderr)  # fmt: skip
            return 0
        raise InputError(f"{output}: already exists; pass --overwrite to replace it.")
    if not args.resume:
        check_no_work_dir(output)

    start = time.perf_counter()
    # Read the first chunk before loading the model: input errors surface in a moment.
    chunks = text_chunks(args, args.chunk_size)
    first = next(chunks)
    # Every encoder setting goes to the Encoder, once: the manifest reads them back from it.
    encoder = get_encoder(args.model, device=args.device, dtype=args.dtype,
                          max_length=args.max_length, backend=args.backend,
                          quantize=args.quantize, max_batch_tokens=args.batch_tokens)  # fmt: skip
    recipes = intended_recipes(wanted, encoder, args)
    names = list(recipes)
    checkpoint = Checkpoint.open(output, _settings(args, encoder, recipes), resume=args.resume)
    done = truncated = resumed = num_chunks = 0
    blank: list[int] = []
    nothing = False
    dims: dict[str, int] = {}
    try:
        with progress_bar(args) as bar:
            for k, chunk in enumerate(itertools.chain([first], chunks)):
                digest = texts_digest(chunk)
                blank.extend(done + i for i, text in enumerate(chunk) if not text.strip())
                if k in checkpoint.done:
                    checkpoint.verify(k, done, digest)
                    resumed += len(chunk)
                    bar.update(len(chunk))
                else:
                    # Truncation is reported once, in the summary line (no warning here).
                    result, stats = embed_recipes(
                        check_inputs(chunk), encoder, recipes, long_text=args.long_text,
                        progress=bar.update,
                    )  # fmt: skip
                    checkpoint.commit(k, done, digest, result)
                    truncated += stats.num_truncated
                    dims = stats.dims
                done += len(chunk)
                num_chunks = k + 1
        if len(blank) == done:
            nothing = True  # the chunks hold nothing worth resuming
            raise InputError(
                f"{args.input}: all {done} texts are blank (empty or whitespace only); "
                "nothing to embed."
            )
        if not dims:
            dims = {n: int(a.shape[1]) for n, a in checkpoint.load(0)[1].items()}
        checkpoint.publish(num_chunks, names, overwrite=args.overwrite)
    except KeyboardInterrupt:
        checkpoint.close()
        print(
            f"poolkit: interrupted; {len(checkpoint.done)} chunks are kept in "
            f"{checkpoint.path}: rerun the same command with --resume to continue.",
            file=sys.stderr,
        )
        return 130
    except Exception as e:
        if checkpoint.done and not nothing:
            checkpoint.close()
            raise _with_note(
                e,
                f"({len(checkpoint.done)} finished chunks are kept in {checkpoint.path}; "
                "fix the problem and rerun with --resume.)",
            ) from e
        checkpoint.discard()
        raise
    seconds = time.perf_counter() - start
    if blank:
        shown = ", ".join(str(i) for i in blank[:5]) + (", ..." if len(blank) > 5 else "")
        print(
            f"poolkit: warning: {len(blank)} blank texts (empty or whitespace only) were kept "
            f"as empty texts, ids {shown}.",
            file=sys.stderr,
        )
    if not args.quiet:
        shape = ", ".join(f"{k}={v}" for k, v in dims.items())
        note = ""
        if truncated:
            note = (f" (longer than {encoder.max_length} tokens; --long-text chunk keeps "
                    "all tokens)")  # fmt: skip
        if resumed:
            note += f"; {resumed} texts resumed from the checkpoint"
        print(
            f"poolkit: {done} texts -> {args.output} [{shape}] in {seconds:.1f} s, "
            f"{(done - resumed) / max(seconds, 1e-9):.1f} texts/s, {truncated} truncated{note}",
            file=sys.stderr,
        )
    return 0
