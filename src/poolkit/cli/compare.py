"""`poolkit compare DATA --task T`: rank every pooling candidate on the user's data."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from poolkit.cli._common import add_common, flag_message, guess_note, report_error, require_extra

__all__ = ["add_parser", "run"]

DESCRIPTION = """\
Embed DATA once and score every pooling candidate on it, best first.
  sts             rows sentence1, sentence2, score (or the STS-B tsv); cosine similarity,
                  Spearman (main) and Pearson
  classification  rows text, label (or SST-2 `LABEL sentence` lines); logistic regression,
                  stratified 5-fold CV or --train FILE; accuracy (main) and macro-F1
  ner             CoNLL `token<TAB>tag` (BIO/IOB); word vectors per sub-token strategy, a
                  probe trained on --train FILE; entity-level micro F1 (main), token accuracy
  relation        SemEval-2010 Task 8 file, or JSONL {"text", "spans": [[s, e], [s, e]]
                  (character offsets, end exclusive), "label"}; two span vectors per example,
                  probe on --train FILE or CV; macro-F1 (main) and accuracy
All scores are fractions. Tables: .jsonl/.csv/.tsv/.parquet with the --*-column names."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``compare`` on an ``argparse`` subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "compare",
        help="score every pooling strategy on your own data",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", metavar="DATA", help="the file to score on")
    p.add_argument("--task", required=True, choices=["sts", "classification", "ner", "relation"],
                   help="what DATA holds and how candidates are scored (see above)")  # fmt: skip
    p.add_argument("--train", metavar="FILE", help="train the probes on FILE, score on DATA")
    p.add_argument(
        "--strategies", nargs="+", action="extend", metavar="S",
        help="compare only these (e.g. cls mean cls+mean mean_no_special; word: first last "
        "mean max first_last; span: endpoints mean max diff_sum attention x,y,x*y) "
        "(default: every candidate of the task)",
    )  # fmt: skip
    p.add_argument(
        "--layers", nargs="*", metavar="L", default=None,
        help="add layer variants (last, last4 = mean of the last four, first_last = mean of "
        "the first and last); alone: all three (default: the last layer only)",
    )  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write a bar chart of the main metric")
    p.add_argument("--overwrite", action="store_true", help="replace existing --json/--plot files")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default: 5)")
    for name in ("text", "label", "sentence1", "sentence2", "score", "spans"):
        p.add_argument(f"--{name}-column", default=name, metavar="C",
                       help=f"column/field of the {name} in table files (default: {name})")  # fmt: skip
    add_common(p)
    p.set_defaults(func=run)
    return p


class _UsageError(ValueError):
    """Bad command-line input: exit status 2."""


def run(args: argparse.Namespace) -> int:
    """Run ``compare`` for parsed ``args``; returns the exit status (0, 1 runtime, 2 input)."""
    try:
        return _run(args)
    except Exception as e:  # one line for the user; the traceback with --debug
        if getattr(args, "debug", False):
            raise
        return report_error(e)


def _output(path: str | None, option: str, suffix: str | None, overwrite: bool) -> Path | None:
    if path is None:
        return None
    out = Path(path)
    if suffix and out.suffix.lower() != suffix:
        raise _UsageError(f"{option} {path}: expected a {suffix} file name.")
    if out.exists() and not overwrite:
        raise _UsageError(f"{option} {path}: file exists; pass --overwrite to replace it.")
    if not out.parent.is_dir():
        raise _UsageError(f"{option} {path}: folder {out.parent} does not exist.")
    return out


def _run(args: argparse.Namespace) -> int:
    from poolkit.compare.datasets import Columns, read_task

    json_path = _output(args.json, "--json", ".json", args.overwrite)
    plot_path = _output(args.plot, "--plot", ".png", args.overwrite)
    if args.folds < 2:
        raise _UsageError(f"--folds {args.folds}: expected at least 2.")
    if plot_path:
        require_extra("--plot", "matplotlib", "matplotlib", "compare")
    if args.task != "sts":
        require_extra(f"--task {args.task}", "sklearn", "scikit-learn", "compare")
    layers = args.layers
    if layers is not None and not layers:
        layers = ["last", "last4", "first_last"]
    elif layers:
        layers = ["last", *layers]
    columns = Columns(
        text=args.text_column, label=args.label_column, sentence1=args.sentence1_column,
        sentence2=args.sentence2_column, score=args.score_column, spans=args.spans_column,
    )  # fmt: skip
    # Read (and so validate) every file before the model loads.
    data = read_task(args.task, args.data, columns)
    train = read_task(args.task, args.train, columns) if args.train else None
    if args.task == "ner" and train is None:
        raise _UsageError("--task ner needs --train FILE (CoNLL) to train the tagging probe.")

    from poolkit.compare import report
    from poolkit.compare.candidates import candidates
    from poolkit.compare.runner import LEVELS, Settings, check_labels, compare

    settings = Settings(
        args.task, args.strategies, layers, args.folds, quiet=args.quiet, long_text=args.long_text
    )
    # Unknown strategies and unusable labels fail here, before the model loads.
    try:
        candidates(LEVELS[args.task], args.strategies, layers)
    except ValueError as e:
        raise _UsageError(
            flag_message(e, {"recipe": "--strategies", "strategy": "--strategies",
                             "strategies": "--strategies", "layers": "--layers"})
        ) from None  # fmt: skip
    check_labels(data, train, settings)
    from poolkit.encoder import Encoder

    start = time.perf_counter()
    encoder = Encoder(
        args.model, device=args.device, dtype=args.dtype, max_length=args.max_length,
        max_batch_tokens=args.batch_tokens,
    )  # fmt: skip
    if encoder.info.pooling_is_guess:
        note = guess_note(encoder.info, "marking {pooling} as intended — check the model card")
        print(f"poolkit: note: {note}", file=sys.stderr)
    results = compare(encoder, data, settings, train)
    seconds = time.perf_counter() - start
    model = encoder.info.reference
    doc = report.to_json(args.task, model, results)
    if json_path:
        report.write_json(json_path, doc)
    if plot_path:
        report.write_plot(plot_path, args.task, model, results)
    best = report.rank(results, report.MAIN_METRIC[args.task])[0]
    print(
        report.table(
            args.task, results, _intended_note(encoder.info, results, args.task),
            winner_command(args, best.recipe),
        ),
        flush=True,
    )  # fmt: skip
    for note in settings.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"{args.task}: {len(data)} examples, {len(results)} candidates, {model}, "
        f"{seconds:.1f} s" + "".join(f"; wrote {p}" for p in (json_path, plot_path) if p),
        file=sys.stderr,
    )
    return 0


def _intended_note(info: Any, results: list, task: str) -> str:
    source = f"{info.pooling}, from {info.pooling_source}"
    if task in ("ner", "relation"):
        return f"(the model's intended pooling, {source}, is a sequence strategy: none marked here)"
    if any(r.intended for r in results):
        return f"* the model's intended pooling ({source})"
    return f"the model's intended pooling ({source}) is not among these candidates"


def winner_command(args: argparse.Namespace, recipe: Any) -> str:
    """The command (or call) that writes the winner's vectors for your own texts: the same
    vectors this table scored, for the same model and settings."""
    name = shlex.quote(str(recipe))
    if recipe.level != "sequence":
        fn = "embed_words(words" if recipe.level == "word" else "embed_spans(texts, char_spans"
        model = "" if args.model is None else f", {args.model!r}"
        return f"embed with the winner: poolkit.{fn}{model}, recipe={str(recipe)!r})"
    parts = ["poolkit", "embed", "INPUT", "-o", "vectors.npy", "--recipe", name]
    for flag, value in (("--model", args.model), ("--max-length", args.max_length),
                        ("--dtype", args.dtype)):  # fmt: skip
        if value is not None:
            parts += [flag, shlex.quote(str(value))]
    if args.long_text != "truncate":
        parts += ["--long-text", args.long_text]
    return "embed with the winner: " + " ".join(parts)
