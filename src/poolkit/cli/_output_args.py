"""``poolkit embed``'s output stage: ``--dims K``, ``--precision P`` (spellings of a recipe's
``/DIMS/PRECISION``), the int8/uint8 ranges (``--ranges FILE``, ``--calibrate FILE``, the
one "texts to calibrate on" flag, or the first ``RANGE_TEXTS`` texts of INPUT; ``export``
takes the first two too) and the record written with the vectors.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from poolkit.errors import InputError
from poolkit.output import PRECISIONS, Calibration, needs_calibration

if TYPE_CHECKING:  # the plan module loads the encoder (torch): not at CLI start-up
    from poolkit.plan import Plan

__all__ = [
    "RANGE_TEXTS",
    "add_output_arguments",
    "add_range_sources",
    "check_output_widths",
    "kept_dims",
    "output_ranges",
    "ranges_from_file",
    "wants_output_stage",
]

RANGE_TEXTS = 1000  # texts of INPUT the int8/uint8 ranges come from without --calibrate


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dims", type=int, default=None, metavar="K",
                        help="keep the first K dimensions (Matryoshka truncation; "
                        "L2-normalised again where the recipe normalises): the recipe's /K")  # fmt: skip
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="store vectors as float32, float16, int8, uint8, binary or ubinary "
                        "(sign bits, 8 per byte): the recipe's /PRECISION; int8/uint8 take "
                        f"their ranges from --ranges, --calibrate, else the first {RANGE_TEXTS} "
                        "input texts (--engine ray: --ranges or --calibrate)")  # fmt: skip
    add_range_sources(parser, "--quantize int8-static uses the first 300, and --precision "
                      "int8/uint8 takes the vectors' ranges from every text of it")  # fmt: skip
    add_fit_source(parser)


def add_fit_source(parser: argparse.ArgumentParser) -> None:
    """--fit FILE [FILE ...]: the fits of the recipes with a fitted transform."""
    parser.add_argument("--fit", nargs="+", default=None, metavar="FILE",
                        help="the fit of each fitted recipe (mean/pca128, mean/whiten, "
                        "mean/abtt3): the .safetensors file poolkit compare wrote for its row "
                        "(or poolkit.fit(...).save); one per fitted recipe")  # fmt: skip


def add_range_sources(parser: argparse.ArgumentParser, calibrate_use: str) -> None:
    """--calibrate FILE (``calibrate_use``: what the command takes from it) and --ranges
    FILE, the int8/uint8 ranges' sources of ``embed`` and ``export``."""
    parser.add_argument("--calibrate", default=None, metavar="FILE",
                        help="texts to calibrate on, read like embed's INPUT (format from its "
                        f"extension; --text-column for jsonl/csv/tsv/parquet): {calibrate_use}")  # fmt: skip
    parser.add_argument("--ranges", default=None, metavar="FILE",
                        help="int8/uint8: reuse the ranges an earlier poolkit embed recorded "
                        "(its .parquet, or the .poolkit.json beside its .npy/.jsonl) or a row "
                        "of a poolkit compare --json file, e.g. to quantise queries like their "
                        "corpus")  # fmt: skip


def wants_output_stage(args: argparse.Namespace, wanted: dict[str, Any] | None) -> bool:
    """Whether the flags ask for an output stage (a recipe's or --dims/--precision)."""
    flags = getattr(args, "dims", None) is not None or getattr(args, "precision", None) is not None
    return flags or any(r.has_output_stage for r in (wanted or {}).values())


def wants_ranges(args: argparse.Namespace, wanted: dict[str, Any] | None) -> bool:
    """Whether a column is stored as int8/uint8 (--precision or a recipe's), needing ranges."""
    precisions = [getattr(args, "precision", None), *(r.precision for r in (wanted or {}).values())]
    return any(needs_calibration(p) for p in precisions)


def check_output_flags(args: argparse.Namespace, wanted: dict[str, Any] | None) -> None:
    """Refusals before any model loads: --ranges without int8/uint8, or beside
    --calibrate; on --engine ray, int8/uint8 without either (every worker must quantise
    with the same ranges, computed once); --fit read (``args.fits``) and checked against
    the fitted recipes (:func:`check_fit_flag`)."""
    check_fit_flag(args, wanted)
    if args.ranges is not None and not wants_ranges(args, wanted):
        raise InputError(arg="--ranges", expected="given with --precision int8 or uint8 (or "
                         "such a --recipe)", got="no int8/uint8 recipe",
                         fix="Drop --ranges.")  # fmt: skip
    if args.ranges is not None and args.calibrate is not None and args.quantize is None:
        raise InputError(arg="--ranges", expected="alone (it and --calibrate both give int8 "
                         "ranges)", got="--calibrate too", fix="Keep one.")  # fmt: skip
    if (getattr(args, "engine", "local") == "ray" and wants_ranges(args, wanted)
            and args.ranges is None and args.calibrate is None):  # fmt: skip
        raise InputError(arg="--precision", expected="int8/uint8 on --engine ray with "
                         "--calibrate FILE or --ranges FILE (the ranges are taken once for "
                         "every worker)", got="neither", fix="Add --calibrate FILE (some of "
                         "your texts) or --ranges FILE.")  # fmt: skip


def check_fit_flag(args: argparse.Namespace, wanted: dict[str, Any] | None) -> None:
    """``args.fits``: the fits of ``--fit`` by recipe, read now; a fitted recipe without
    one, or a fit no recipe takes, refused in one line (before the model loads)."""
    from poolkit.fitted import load_fits

    files = getattr(args, "fit", None)
    from poolkit.cli._flags import flagged

    try:
        args.fits = load_fits(files)
    except (TypeError, ValueError) as e:
        raise flagged(e, {"fit": "--fit"}) from None
    fitted = {str(r.fitted) for r in (wanted or {}).values() if r.fitted is not None}
    missing = sorted(fitted - set(args.fits))
    if missing:
        raise InputError(arg="--fit", expected=f"the fit file of {missing[0]!r} (its "
                         "transform is fitted on a corpus)", got=", ".join(files or []) or "none",
                         fix="Pass the file poolkit compare wrote for its row (its JSON's "
                         "fit.file), or fit one with poolkit.fit(...).save(FILE).")  # fmt: skip
    unused = sorted(set(args.fits) - fitted)
    if unused:
        raise InputError(arg="--fit", expected="fits of the fitted recipes asked for "
                         f"({', '.join(sorted(fitted)) or 'none'})", got=f"a fit of "
                         f"{unused[0]!r}", fix="Drop it, or add its recipe.")  # fmt: skip


def check_output_widths(args: argparse.Namespace, encoder: Any, recipes: dict[str, Any]) -> Any:
    """The plan's checks once the model is loaded, before any text (both engines): the
    prompt flags, the model's pipeline, each /DIMS (or --dims) against its vectors' width,
    in one line naming the flag; sparse recipes: the head they need; a local output's
    format against the recipes' kind. Returns the job's one resolution, its family's plan
    (:func:`poolkit.families.family_plan`), int8/uint8 ranges not set yet
    (:meth:`~poolkit.plan.Plan.with_ranges` adds them)."""
    from poolkit.cli._flags import flagged
    from poolkit.embedding import recipe_kind
    from poolkit.families import family_plan

    try:  # the prompt first (each family's own rule: a multi-vector folder's sides)
        plan = family_plan(encoder, recipes, prompt_name=args.prompt_name, prompt=args.prompt,
                           pipeline="pooled" if args.pooled_only else "full",
                           fits=getattr(args, "fits", None))  # fmt: skip
    except (TypeError, ValueError) as e:
        raise flagged(
            e, {"dims": "--dims" if args.dims is not None else "--recipe", "fit": "--fit"}
        ) from None
    if args.output != "-" and getattr(args, "engine", "local") != "ray":
        from poolkit.io.writers import check_output

        check_output(Path(args.output), list(recipes), True, recipe_kind(recipes))
    return plan


def _read_record(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise InputError(arg="--ranges", expected="an existing file", got=f"{path}, which is "
                         "not there", fix="Name the .parquet or the .poolkit.json an earlier "
                         "poolkit embed wrote.")  # fmt: skip
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            meta = pq.read_schema(p).metadata or {}
            return dict(json.loads(meta.get(b"poolkit", b"{}")))
        return dict(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as e:
        raise InputError(arg="--ranges", expected="a record poolkit embed wrote",
                         got=f"{path} ({e})") from None  # fmt: skip


def ranges_from_file(path: str, name: str, recipe: Any) -> Calibration:
    """The int8/uint8 ranges of column ``name`` (``recipe``) in a record an embed output or a
    ``poolkit compare --json`` file holds (the only ones, where it holds one set)."""
    record = _read_record(path)
    if isinstance(record.get("results"), list):  # poolkit compare --json: its rows' ranges
        found = {row["recipe"]: row["ranges"] for row in record["results"]
                 if isinstance(row, dict) and row.get("ranges") and not row.get("rescore")}  # fmt: skip
    else:  # an embed output's columns
        found = {n: c["calibration"] for n, c in (record.get("columns") or {}).items()
                 if isinstance(c, dict) and c.get("calibration")}  # fmt: skip
    pick = found.get(name) or found.get(str(recipe))
    if pick is None and len(found) == 1:
        pick = next(iter(found.values()))
    if pick is None:
        raise InputError(arg="--ranges", expected=f"int8/uint8 ranges for {name!r}",
                         got=f"{path}, which has {sorted(found) or 'none'}", fix="Name the "
                         "output of the corpus' run, or the --json of the poolkit compare "
                         "that scored the row.")  # fmt: skip
    cal = Calibration.from_json(pick)
    if cal.dims != (recipe.dims or cal.dims):
        raise InputError(arg="--ranges", expected=f"ranges for the {recipe.dims} dimensions "
                         f"{name!r} keeps", got=f"{path}: ranges for {cal.dims}",
                         fix="Use the same --dims as the corpus.")  # fmt: skip
    return dataclasses.replace(cal, source=f"--ranges {path}")


def output_ranges(
    args: argparse.Namespace,
    encoder: Any,
    recipes: dict[str, Any],
    first: list[str],
    *,
    first_source: str | None = None,
    plan: Plan | None = None,
    **embed_options: Any,
) -> dict[str, Calibration]:
    """The int8/uint8 ranges of ``recipes`` by name: from --ranges, --calibrate FILE (its
    first RANGE_TEXTS texts) or the first RANGE_TEXTS non-blank texts of ``first`` (the
    input's first part, --part-size texts; or, described by ``first_source``, texts the
    caller took from it: ``--chunks``' chunk texts); each records its source. ``plan``:
    the job's plan (its float form embeds the texts; see :func:`check_output_widths`)."""
    from poolkit.embedding import CalibrationTexts, calibrate_recipes

    need = {n: r for n, r in recipes.items() if needs_calibration(r.precision)}
    if not need:
        return {}
    if args.ranges is not None:
        return {n: ranges_from_file(args.ranges, n, r) for n, r in need.items()}
    if args.calibrate is not None:
        return _calibrate_file(args, encoder, need, plan=plan, **embed_options)
    if first_source is not None:
        texts = [t for t in first if t.strip()][:RANGE_TEXTS]
        source = first_source
    else:
        kept = [i for i, t in enumerate(first) if t.strip()][:RANGE_TEXTS]
        texts = [first[i] for i in kept]
        last = kept[-1] if kept else -1
        source = f"the first {len(texts)} non-blank input texts (ids 0..{last})"
    if not texts:
        raise InputError(arg="--precision", expected="int8/uint8 ranges from non-blank texts",
                         got=f"none in {source}", fix="Pass --calibrate FILE with some of your "
                         "texts.")  # fmt: skip
    found = calibrate_recipes(encoder, need, CalibrationTexts(texts), plan=plan, **embed_options)
    return {n: dataclasses.replace(c, source=source) for n, c in found.items()}


def _calibrate_file(
    args: argparse.Namespace,
    encoder: Any,
    need: dict[str, Any],
    *,
    plan: Plan | None = None,
    **embed_options: Any,
) -> dict[str, Calibration]:
    """The ranges of every non-blank text of ``--calibrate FILE``, embedded a part at a time
    (memory: one part's vectors) and merged: per dimension the least and the greatest value
    over all parts."""
    from poolkit.embedding import CalibrationTexts, calibrate_recipes

    lows: dict[str, np.ndarray] = {}
    highs: dict[str, np.ndarray] = {}
    count = parts = 0
    found: dict[str, Calibration] = {}
    for texts in calibrate_file_texts(args):
        count, parts = count + len(texts), parts + 1
        found = calibrate_recipes(encoder, need, CalibrationTexts(texts), plan=plan,
                                  **embed_options)  # fmt: skip
        for name, cal in found.items():
            low, high = cal.ranges.astype(np.float64)
            lows[name] = low if name not in lows else np.minimum(lows[name], low)
            highs[name] = high if name not in highs else np.maximum(highs[name], high)
    if not count:
        raise InputError(arg="--calibrate", expected="a file with non-blank texts",
                         got=f"{args.calibrate}, which has none", fix="Name a file with some of "
                         "your texts.")  # fmt: skip
    source = f"--calibrate {args.calibrate} (all its {count} non-blank texts)"
    if parts == 1:  # the ranges as calibrated, not rebuilt from them
        return {n: dataclasses.replace(c, source=source) for n, c in found.items()}
    return {n: Calibration.from_ranges(np.vstack((lows[n], highs[n])).astype(np.float32), source)
            for n in need}  # fmt: skip


def calibrate_file_texts(args: argparse.Namespace, part: int = 4096) -> Iterator[list[str]]:
    """The non-blank texts of ``--calibrate FILE``, ``part`` at a time, read as INPUT is (a
    BEIR folder or ``corpus.jsonl``: title and text joined, as ``poolkit compare`` scores
    documents)."""
    return file_texts(args.calibrate, args.text_column, part)


def file_texts(path: str, text_column: str, part: int = 4096) -> Iterator[list[str]]:
    """The non-blank texts of the file (or BEIR folder) ``path``, ``part`` at a time, read
    as embed's INPUT is (``text_column`` for tables; a BEIR folder or ``corpus.jsonl``:
    title and text joined, as ``poolkit compare`` scores documents)."""
    from poolkit.cli._rows import beir_input
    from poolkit.io.readers import input_format, read_rows

    probe = argparse.Namespace(input=path, text_column=text_column, input_format=None,
                               id_column="_id")  # fmt: skip
    title = beir_input(probe)
    column = None if input_format(probe.input, None) == "txt" else text_column
    for rows in read_rows(probe.input, text_column=column, title_column=title, chunk_size=part):
        texts = [t for t in rows.texts if t.strip()]
        if texts:
            yield texts


def kept_dims(widths: dict[str, int], recipes: dict[str, Any]) -> dict[str, int]:
    """The dimensions kept per column, from the stored widths (packed bits: 8 a byte)."""
    dims = dict(widths)
    for n, r in recipes.items():
        if r.precision in ("binary", "ubinary") and n in dims:
            dims[n] = r.dims or dims[n] * 8
    return dims
