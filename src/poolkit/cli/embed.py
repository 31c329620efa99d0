"""``poolkit embed INPUT -o OUTPUT``: one vector per text (``--chunks``: per chunk, see
:mod:`poolkit.cli._chunk_args`), committed part by part (``--part-size`` texts) to
``OUTPUT.poolkit-work/`` (:mod:`poolkit.io.checkpoint`); OUTPUT appears, complete, only at
the end, and ``--resume`` recomputes at most the part that was in flight. Blank texts are
kept as empty texts (row ids stay line-aligned) with a warning; only blank texts: refused.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from poolkit._errors import already_exists, count
from poolkit._versions import installed_versions
from poolkit.cli._backend_args import add_backend_arguments, calibration_texts, check_backend_args
from poolkit.cli._cache_args import add_cache_arguments, cache_line, open_cache
from poolkit.cli._chunk_args import add_chunk_arguments, check_chunk_flags
from poolkit.cli._common import (
    add_common,
    add_input_format,
    guess_note,
    positives,
    progress_bar,
)
from poolkit.cli._job import job_settings, run_job
from poolkit.cli._multivector import MultivectorPart, check_multivector_args
from poolkit.cli._output_args import (
    add_output_arguments,
    check_output_flags,
    check_output_widths,
    kept_dims,
    output_ranges,
    wants_ranges,
)
from poolkit.cli._provenance import provenance
from poolkit.cli._ray_engine import add_arguments as add_engine_arguments
from poolkit.cli._ray_engine import dispatch as dispatch_engine
from poolkit.cli._recipe_args import intended_recipes, recipes_from_args
from poolkit.cli._rows import UserIds, add_row_arguments, kept_column, row_setup
from poolkit.errors import InputError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "embed",
        help="embed the texts of a file",
        description="Embed every text of INPUT and write the vectors to OUTPUT, in input "
        "order, with the model's intended pooling unless --recipe says otherwise. With "
        "--chunks, long texts (documents) are cut into chunks and each chunk gets a row of "
        "its own: id (the document's), chunk, start, end, vectors (naive, or --late).",
    )
    parser.add_argument("input", metavar="INPUT",
                        help=".txt (one text per line), .jsonl, .csv, .tsv, .parquet, or - for stdin")  # fmt: skip
    parser.add_argument("-o", "--output", required=True, metavar="OUTPUT",
                        help=".npy (float32 matrix), .parquet (id + one column per strategy), "
                        ".jsonl, .npz (a sparse recipe's CSR matrix; a multi-vector recipe's "
                        "flat token matrix + offsets), or - for JSON Lines on stdout")  # fmt: skip
    parser.add_argument("--recipe", "-r", nargs="+", action="extend", default=None,
                        metavar="NAME", help="a row name of poolkit compare, e.g. mean, "
                        "mean_no_special, cls+mean@last4; several give several columns")  # fmt: skip
    parser.add_argument("--strategy", "-s", nargs="+", action="extend", default=None,
                        metavar="S", help="shorthand: e.g. mean, cls, cls+mean, with --layers and "
                        "--exclude-special; several give several columns "
                        "(default: the model's intended pooling)")  # fmt: skip
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                        help="L2-normalise (default: as the model does)")  # fmt: skip
    add_input_format(parser)  # --text-column, --input-format
    add_row_arguments(parser)  # --id-column, --keep-columns
    parser.add_argument(
        "--layers",
        default=None,
        help="layers to mix: last4, first_last, --layers=-2, or --layers=-1,-2 (default: last)",
    )
    parser.add_argument("--exclude-special", action="store_true",
                        help="pool without [CLS]/[SEP]-like tokens")  # fmt: skip
    parser.add_argument("--prompt-name", default=None, metavar="NAME",
                        help="one of the model's prompts (config_sentence_transformers.json), "
                        "e.g. query (default: the model's default prompt, if any)")  # fmt: skip
    parser.add_argument("--prompt", default=None, metavar="TEXT",
                        help="a prompt of your own, put before every text ('' for none, not "
                        "even the model's default)")  # fmt: skip
    parser.add_argument("--token-offsets", action="store_true",
                        help="a multi-vector recipe's .parquet/.jsonl output: an offsets column, "
                        "each token's [start, end) characters in its text ([0, 0] for special, "
                        "prompt and [MASK] tokens)")  # fmt: skip
    parser.add_argument("--pooled-only", action="store_true",
                        help="the pooled vectors, before the model's modules after pooling "
                        "(Dense, LayerNorm, Normalize); default: the model's whole pipeline")  # fmt: skip
    # The default is poolkit.encoder.SORT_WINDOW (not imported: it loads the backends), so a
    # part sorts and batches as the library does (tests/test_batch_composition.py checks).
    parser.add_argument("--part-size", type=int, default=4096, metavar="N",
                        help="texts read, embedded and committed at a time (default: 4096; "
                        "a multiple of it batches as poolkit.embed does)")  # fmt: skip
    # The old spelling, before "chunk" came to mean a piece of a document: still accepted,
    # same dest, not shown in --help.
    parser.add_argument("--chunk-size", dest="part_size", type=int, default=argparse.SUPPRESS,
                        metavar="N", help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    add_backend_arguments(parser)  # --backend, --quantize, --calibrate
    add_output_arguments(parser)  # --dims, --precision, --ranges
    add_chunk_arguments(parser)  # --chunks, --late, --stride, --chunk-text
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted job from OUTPUT.poolkit-work (same "
                        "command, same settings); finished parts (--engine ray: finished "
                        "input files) are not recomputed")  # fmt: skip
    add_cache_arguments(parser, default=False)
    add_common(parser)
    add_engine_arguments(parser)  # --engine ray, --address, --workers, --cpus-per-worker
    parser.set_defaults(func=run)
    return parser


def _local_settings(
    args: argparse.Namespace, encoder: Any, recipes: dict[str, Any], mv: Any = None
) -> dict[str, Any]:
    """The local job's manifest settings (:func:`~poolkit.cli._job.job_settings`): the
    values its loaded Encoder settled on (``mv``: a multi-vector job's own)."""
    import numpy

    from poolkit.io.checkpoint import model_fingerprint
    from poolkit.io.readers import input_format
    from poolkit.io.writers import output_format
    from poolkit.prompts import resolve_prompt

    head = {
        "model": encoder.info.reference,
        "model_files": model_fingerprint(encoder.info.path),
        "strategies": list(recipes),
        "recipes": [str(r) for r in recipes.values()],
        "normalize": [r.resolved_normalize(encoder.info.normalize) for r in recipes.values()],
        "prompt": None if mv else resolve_prompt(encoder.info, args.prompt_name, args.prompt),
        "pipeline": _pipeline(args),
        **(mv.settings() if mv else {}),
    }
    engine = {"max_length": encoder.max_length, "batch_tokens": encoder.max_batch_tokens,
              "input_format": input_format(args.input, args.input_format),
              "output_format": output_format(args.output), "device": encoder.device}  # fmt: skip
    versions = {**installed_versions("torch", "transformers"), "numpy": numpy.__version__}
    return job_settings(args, head, engine, versions)


def _pipeline(args: argparse.Namespace) -> str:
    return "pooled" if args.pooled_only else "full"


def _kind(recipes: dict[str, Any]) -> str:
    """The recipes' one kind (dense or sparse); mixing them is refused in one line."""
    from poolkit.embedding import recipe_kind

    try:
        return recipe_kind(recipes)
    except ValueError:
        raise InputError(arg="--recipe", expected="all dense or all sparse recipes (they write "
                         "different outputs)", got="both", fix="Embed them in separate "
                         "runs.") from None  # fmt: skip


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as scope:  # the loaded encoder outlives the command
        return _run(args, scope)


def _run(args: argparse.Namespace, scope: contextlib.ExitStack) -> int:
    to_stdout = args.output == "-"
    if to_stdout and args.engine == "ray":  # -o - (stdout) keeps no file: refuse what needs one
        raise InputError(arg="-o", expected="a folder with --engine ray (it writes Parquet "
                         "shards)", got="- (stdout)", fix="Name a folder.")  # fmt: skip
    if to_stdout and args.resume:
        raise InputError(arg="-o", expected="an OUTPUT file with --resume", got="- (stdout), "
                         "which keeps no work directory to resume from")  # fmt: skip
    if to_stdout and args.overwrite:
        raise InputError(arg="--overwrite", expected="given with an OUTPUT file",
                         got="-o - (stdout)", fix="Drop it.")  # fmt: skip
    plan = check_chunk_flags(args)  # --chunks (None without)
    wanted, _ = recipes_from_args(args)  # the pooling flags, validated once
    if wanted is None and not args.pooled_only:  # a multi-vector folder: its own recipe
        from poolkit.model_folder import DEFAULT_MODEL, read_model_info, resolve_model

        # The folder's files only: no tokenizer, no torch (a cached ONNX run imports neither).
        ref = DEFAULT_MODEL if args.model is None else args.model
        info = read_model_info(resolve_model(ref), reference=ref)
        if info.is_multivector_folder:
            wanted = {info.multivector or "intended": info.intended_multivector()}
    check_output_flags(args, wanted)  # before Ray starts: its engine refuses an output stage
    positives(args, "--part-size", "--batch-tokens", "--max-length")  # both engines
    multivector = check_multivector_args(args, wanted)  # its dense-only flags refused
    kind = None if wanted is None else _kind(wanted)
    if multivector and args.keep_columns:
        raise InputError(arg="--keep-columns", expected="given with a single-vector recipe",
                         got="a multi-vector output, one row per text's tokens and no other "
                         "column", fix="Drop --keep-columns.")  # fmt: skip
    cache = open_cache(args)  # its flags refused before any model loads (on Ray: each
    # worker opens its own, in the cache root of its machine)
    if (status := dispatch_engine(args, wanted, plan)) is not None:  # --engine ray
        return status
    title, keep = row_setup(args)  # a BEIR folder or corpus.jsonl: compare's documents
    from poolkit.embedding import check_inputs, get_encoder
    from poolkit.io.checkpoint import Checkpoint, Part, check_no_work_dir, texts_digest
    from poolkit.io.inputstamp import InputChangedError, InputStamp
    from poolkit.io.writers import check_output

    check_backend_args(args, output_ranges=wants_ranges(args, wanted))
    if args.input != "-" and Path(args.input).is_dir():
        raise InputError(where=args.input, expected="one file (or - for stdin)", got="got a folder",
                         fix="Add --engine ray to embed every file of a folder (see "
                         "docs/scaling.md).")  # fmt: skip
    output = Path(args.output)
    if not to_stdout:
        check_output(output, list(wanted) if wanted else ["intended"], True, kind)
    if output.exists() and not args.overwrite and not to_stdout:
        if args.resume and Checkpoint.finished(output):
            # Killed after publishing OUTPUT, before removing the work directory.
            Checkpoint.remove(output)
            print(f"poolkit: {output} was already complete; removed its work directory.",
                  file=sys.stderr)  # fmt: skip
            return 0
        raise InputError(already_exists(output, fix="--overwrite"))
    if not args.resume and not to_stdout:
        check_no_work_dir(output)

    start = time.perf_counter()
    stamp = InputStamp.take(args.input)  # compared before each commit and after the last read
    # Read the first part before loading the model: input errors surface in a moment.
    from poolkit.io.readers import read_rows

    # The texts with where each was read, their ids, the fields kept (and column:NAME's
    # spans beside them).
    parts: Any = read_rows(args.input, text_column=args.text_column, fmt=args.input_format,
                           column=None if plan is None else plan.chunker.column,
                           chunk_size=args.part_size, id_column=args.id_column or "auto",
                           keep_columns=keep, title_column=title)  # fmt: skip
    first = next(parts)
    calibration = calibration_texts(args, first.texts)  # int8-static only
    # Every encoder setting goes to the Encoder, once: the manifest reads them back from it.
    encoder = get_encoder(args.model, device=args.device, dtype=args.dtype,
                          max_length=args.max_length, backend=args.backend,
                          quantize=args.quantize, max_batch_tokens=args.batch_tokens,
                          calibrate=calibration)  # fmt: skip
    encoder.state_cache = cache
    scope.callback(setattr, encoder, "state_cache", None)
    recipes = intended_recipes(wanted, encoder.info, args)
    prompts = {"prompt_name": args.prompt_name, "prompt": args.prompt, "pipeline": _pipeline(args)}
    options = {"long_text": args.long_text, **prompts}
    mv = chunking = first_chunks = job = None
    ranges: dict[str, Any] = {}
    if multivector:  # the folder's sides and projection, not the dense pipeline
        mv = MultivectorPart(args, encoder, recipes)
    else:  # the job's one resolution of its recipes
        job = check_output_widths(args, encoder, recipes)
    if mv is None and plan is None:
        ranges = output_ranges(args, encoder, recipes, first.texts, plan=job, **options)
    elif mv is None:
        from poolkit.cli._chunk_args import PartChunker
        from poolkit.cli._output_args import RANGE_TEXTS

        chunking = PartChunker(plan, encoder, recipes)
        first_chunks = chunking.chunk(first, 0)  # bad spans refused before the work dir
        texts, source = chunking.calibration_texts(first_chunks, RANGE_TEXTS)
        ranges = output_ranges(args, encoder, recipes, texts, first_source=source, plan=job,
                               **options)  # fmt: skip
    if job is not None:  # every part, chunked or not, runs this plan
        job = job.with_ranges(ranges)
    names = list(recipes)
    blank: list[int] = []  # ids of blank texts (kept as empty texts; --chunks refuses them)
    tally = _Tally()
    checkpoint: Any
    if to_stdout:
        from poolkit.cli._stdout import StdoutSink

        checkpoint = StdoutSink(names, blank)
    else:
        settings = _local_settings(args, encoder, recipes, mv)
        if calibration is not None:  # a resumed job must calibrate on the same texts
            settings["calibration"] = texts_digest(calibration)
        if ranges:  # ... and quantise its vectors with the same ranges
            settings["output_ranges"] = {n: c.digest() for n, c in ranges.items()}
        if args.fits:  # ... and transform them with the same fits
            settings["fits"] = {n: f.digest() for n, f in args.fits.items()}
        if chunking is not None:
            settings["chunks"] = plan.settings()
        if first.ids is not None or keep:  # a resumed job must read the same ids
            settings["rows"] = {"id_column": first.id_column, "keep_columns": list(keep)}

        def metadata(arrays: Any) -> Any:  # the output's record, from its first stored rows
            tally.dims = _dims_of(arrays, recipes)  # also the widths of a job all resumed
            record = (job or mv.plan).record(tally.dims)  # what the columns are
            record = record if plan is None else plan.metadata(record)
            origin = provenance(args, encoder, recipes, settings, settings.get("rows"))
            return {**(record or {"poolkit": origin["versions"]["poolkit"]}),
                    "provenance": origin}  # fmt: skip

        checkpoint = Checkpoint.open(output, settings, resume=args.resume, strategies=names,
                                     metadata=metadata, kind=kind)  # fmt: skip
    if wanted is None and encoder.info.pooling_is_guess:  # said once the job is on
        print(f"poolkit: note: {guess_note(encoder.info)}", file=sys.stderr)
    elif wanted is None and "exported by poolkit export" in encoder.info.pooling_source:
        if not args.quiet:  # a folder poolkit wrote: say which choice it carries
            print(f"poolkit: pooling {encoder.info.pooling} ({encoder.info.pooling_source})",
                  file=sys.stderr)  # fmt: skip
    user_ids = UserIds()

    def embed_part(k: int, part: Any, progress: Any) -> Part:
        """Part ``k`` for the sink: verified if resumed, else embedded now."""
        texts = part.texts
        blank.extend(tally.texts + i for i, text in enumerate(texts) if not text.strip())
        digest = texts_digest(texts) if chunking is None else chunking.digest(part)
        first = tally.texts
        own = user_ids.check(part, first)  # the user's ids (None: row numbers)
        kept = {n: kept_column(v) for n, v in part.kept.items()}
        if own is not None or kept:  # a resumed part must have had the same ids and fields
            digest = texts_digest([digest, json.dumps([own, part.kept], default=str)])
        tally.texts += len(texts)
        if k in checkpoint.done:
            tally.resumed += len(texts)
            tally.rows += checkpoint.rows(k)
            progress(len(texts))
            return Part(k, first, digest)
        ids = columns = None
        if mv is not None:  # one row per token (MUVERA: per text)
            result, ids, columns, stats = mv.embed(names[0], check_inputs(texts), first,
                                                   progress)  # fmt: skip
            tally.truncated += stats.num_truncated
            if own is not None:  # each row carries its text's id
                ids = own if ids is None else [own[int(i) - first] for i in ids]
        elif chunking is None:  # truncation is reported once, in the summary line
            result, stats = job.run(encoder, check_inputs(texts), long_text=args.long_text,
                                    progress=progress)  # fmt: skip
            tally.truncated += stats.num_truncated
        else:  # one row per chunk
            piece = first_chunks if k == 0 else chunking.chunk(part, first)
            result, stats = chunking.embed(piece, job, progress=progress)
            ids, columns = piece.rows(chunking.with_text)
            at = ids - first  # each chunk's document, in the part
            # The kept columns' rows of each chunk: int64 arrays, or lists of strings.
            columns |= {n: v[at] if not isinstance(v, list) else [v[i] for i in at.tolist()]
                        for n, v in kept.items()}  # fmt: skip
            if own is not None:
                ids = [own[i] for i in at.tolist()]
            tally.truncated += len(stats.truncated)
        if chunking is None and mv is None and (own is not None or kept):  # the user's rows
            ids = own if own is not None else list(range(first, first + len(texts)))
            columns = kept
        if stamp is not None:  # never checkpoint texts read from a changing file
            stamp.check()
        rows = len(texts) if ids is None or mv is not None else len(ids)
        tally.rows += rows
        tally.dims = _dims_of(result, recipes) if rows else tally.dims
        return Part(k, first, digest, result, ids, columns, len(texts))

    def finish() -> None:
        if stamp is not None:
            stamp.check()
        if len(blank) == tally.texts:
            tally.nothing = True  # the parts hold nothing worth resuming
            raise InputError(where=args.input, expected="a text to embed", got=f"all "
                             f"{tally.texts} texts are blank (empty or whitespace only)")  # fmt: skip
        # Opens the output at its first stored rows if no part was computed: metadata() then
        # gives the summary its widths (a job all resumed).
        checkpoint.publish(tally.parts, overwrite=args.overwrite)

    def kept(failed: bool) -> str | None:
        done = checkpoint.done
        if to_stdout or (failed and (not done or tally.nothing)):
            return None
        noun = count(len(done), "finished part" if failed else "part")  # left for --resume
        return f"{noun} {'is' if len(done) == 1 else 'are'} kept"

    def cause(error: Exception) -> Exception:
        if stamp is not None and not isinstance(error, InputChangedError) and stamp.changed():
            # A reader error on a file being rewritten is a symptom; report the cause.
            try:
                stamp.check()
            except InputChangedError as changed:
                return changed
        return error

    def work() -> Iterator[Part]:
        from poolkit.cli._progress import count_rows

        total = None if args.quiet else count_rows(args.input, args.input_format)
        with progress_bar(args, "texts" if chunking is None else "documents", total) as bar:
            for k, part in enumerate(itertools.chain([first], parts)):
                tally.parts = k + 1
                yield embed_part(k, part, bar.update)

    if (status := run_job(checkpoint, work(), finish, kept, cause)) is not None:
        return status
    if ranges and to_stdout and not args.quiet:
        print("poolkit: note: -o - records no int8/uint8 ranges (they came from "
              f"{next(iter(ranges.values())).source}); write a file to keep them.",
              file=sys.stderr)  # fmt: skip
    if blank:
        shown = ", ".join(str(i) for i in blank[:5]) + (", ..." if len(blank) > 5 else "")
        kept_as = (
            "was kept as an empty text, id" if len(blank) == 1 else "were kept as empty texts, ids"
        )
        print(f"poolkit: warning: {count(len(blank), 'blank text')} (empty or whitespace only) "
              f"{kept_as} {shown}.", file=sys.stderr)  # fmt: skip
    if not args.quiet:
        out = checkpoint.path if to_stdout else args.output
        limit = encoder.max_length if mv is None else mv.max_length
        _summary(tally, out, limit, time.perf_counter() - start, chunking is not None,
                 window=mv is None)  # fmt: skip
        if cache is not None:
            print(f"poolkit: {cache_line(cache)}", file=sys.stderr)
    return 0


def _summary(
    tally: _Tally, out: Any, max_length: int, seconds: float, chunks: bool, window: bool = True
) -> None:
    """``poolkit: N texts -> OUTPUT [...] in ...``; with --chunks ``N documents -> M chunks
    -> OUTPUT [...]``, rates in documents and truncation counted in documents (``window``:
    --long-text window is there to keep long texts whole)."""
    unit = "document" if chunks else "text"
    shape = ", ".join(f"{k}={v}" for k, v in tally.dims.items())
    note = ""
    if tally.truncated and chunks:
        note = f" (documents with a chunk longer than {max_length} tokens, cut there)"
    elif tally.truncated:
        hint = "; --long-text window keeps all tokens" if window else ""
        note = f" (longer than {max_length} tokens{hint})"
    if tally.resumed:
        note += f"; {count(tally.resumed, unit)} resumed from the checkpoint"
    rows = f" -> {count(tally.rows, 'chunk')}" if chunks else ""
    rate = (tally.texts - tally.resumed) / max(seconds, 1e-9)
    print(f"poolkit: {count(tally.texts, unit)}{rows} -> {out} [{shape}] in {seconds:.1f} s, "
          f"{rate:.1f} {unit}s/s, {tally.truncated} truncated{note}", file=sys.stderr)  # fmt: skip


class _Tally:
    """What a local job has done so far, for its checks and its summary line."""

    def __init__(self) -> None:
        self.texts = self.rows = self.resumed = self.truncated = self.parts = 0
        self.dims: dict[str, int] = {}
        self.nothing = False  # every text blank: nothing worth resuming


def _dims_of(arrays: Any, recipes: dict[str, Any]) -> dict[str, int]:
    """The dimensions kept per column, from stored arrays."""
    return kept_dims({n: int(a.shape[1]) for n, a in arrays.items()}, recipes)
