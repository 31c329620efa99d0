"""`poolkit compare DATA --task T`: rank every pooling candidate on the user's data."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from poolkit._errors import already_exists
from poolkit._versions import installed_versions
from poolkit.cli._backend_args import check_backend_args
from poolkit.cli._cache_args import add_cache_arguments, cache_line, cache_record, open_cache
from poolkit.cli._common import add_common, guess_note, require_extra
from poolkit.cli._flags import COMPARE_BUDGET, COMPARE_CHUNKS, COMPARE_RECIPES, flagged
from poolkit.cli._rows import BEIR_JOIN
from poolkit.compare.bootstrap import DEFAULT_RESAMPLES
from poolkit.errors import InputError
from poolkit.model_folder import DEFAULT_MODEL

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
  retrieval       a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) or a table of
                  (query, document) rows; exact cosine search; nDCG@10 (main), MRR@10,
                  Recall@100, MAP@100 (as MTEB/pytrec_eval compute them); every row's
                  bytes per document, query and search time beside them
  clustering      rows text, label (or SST-2 lines); MiniBatchKMeans with k = number of
                  labels, 5 seeds; V-measure (main, mean over the seeds)
Every row carries a 95% paired-bootstrap interval per metric (--bootstrap N resamples; 0: off)
and whether it differs significantly from the model's intended pooling. All scores are
fractions. Tables: .jsonl/.csv/.tsv/.parquet with the --*-column names."""


# The --NAME-column flags of table files (retrieval's --query/--document-column besides).
_COLUMNS = ("text", "label", "sentence1", "sentence2", "score", "spans")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``compare`` on an ``argparse`` subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "compare",
        help="score every pooling strategy on your own data",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "data", metavar="DATA", help="the file to score on (retrieval: or a BEIR folder)"
    )
    p.add_argument(
        "--task", required=True,
        choices=["sts", "classification", "ner", "relation", "retrieval", "clustering"],
        help="what DATA holds and how candidates are scored (see above)",
    )  # fmt: skip
    p.add_argument("--train", metavar="FILE", help="train the probes on FILE, score on DATA "
                   "(sts: fit the fitted rows on its sentences, train /projK rows on its "
                   "scores; retrieval: a qrels split of the BEIR folder, e.g. train, that "
                   "/projK rows train on)")  # fmt: skip
    p.add_argument("--fit", metavar="FILE", default=None,
                   help="fitted rows (mean/pca128, mean/whiten, mean/abtt3): fit on the texts "
                   "of FILE, read like embed's INPUT (default: retrieval, the documents; sts, "
                   "the --train sentences); never DATA")  # fmt: skip
    p.add_argument("--fits-dir", metavar="DIR", default=None,
                   help="save each fit there, the file `poolkit embed --fit` reads (default: "
                   "fits/ in poolkit's cache folder)")  # fmt: skip
    p.add_argument(
        "--recipes", nargs="+", action="extend", metavar="NAME",
        help="compare only these, named as embed --recipe takes them (e.g. mean cls+mean@last4 "
        "mean_no_special word:first span:x,y,x*y); retrieval also bm25, splade and hybrid rows "
        "of two rows: 'rrf(mean,bm25)', 'fuse(mean,bm25,0.5)'; with several --model, of two "
        "models' rows named as the table prints them: 'rrf(minilm:mean,splade:splade)' "
        "(default: every candidate of the task, and rrf of the intended row with bm25)",
    )  # fmt: skip
    # The old spelling (before the flag took recipe names): same dest, not in --help.
    p.add_argument("--strategies", dest="recipes", nargs="+", action="extend",
                   metavar="NAME", help=argparse.SUPPRESS)  # fmt: skip
    p.add_argument(
        "--layers", nargs="*", metavar="L", default=None,
        help="add layer variants (last4 = mean of the last four, first_last, second_last, "
        "indices like --layers=-1,-2); alone: last, last4 and first_last (default: last only)",
    )  # fmt: skip
    p.add_argument("--prompt-name", "--query-prompt-name", dest="prompt_name", default=None,
                   metavar="NAME", help="one of the model's prompts before every text "
                   "(retrieval: every query) (default: the model's default prompt, if any)")  # fmt: skip
    p.add_argument("--document-prompt-name", default=None, metavar="NAME",
                   help="retrieval: the model's prompt before every document (default: the "
                   "model's default prompt, if any)")  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write a bar chart of the main metric")
    p.add_argument("--explain", action="store_true",
                   help="also print what each column, mark and row kind of the table means "
                   "(the --report page holds it under 'How to read this table')")  # fmt: skip
    p.add_argument(
        "--report", metavar="FILE.html",
        help="write one self-contained HTML page: the table, the intervals drawn, the notes, "
        "the data set, model and versions, and each row's embed and export commands",
    )  # fmt: skip
    p.add_argument(
        "--overwrite", action="store_true", help="replace existing --json/--plot/--report files"
    )
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default: 5)")
    p.add_argument(
        "--bootstrap", type=int, default=DEFAULT_RESAMPLES, metavar="N",
        help=f"bootstrap resamples for the 95%% intervals and the paired test; 0: off "
        f"(default: {DEFAULT_RESAMPLES})",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    p.add_argument("--backend", choices=["torch", "onnx", "openvino"], default="torch",
                   help="runtime: torch, onnx (ONNX Runtime, CPU; last layer only) or "
                   "openvino (OpenVINO, CPU; last layer only; --dtype bfloat16 for bf16) "
                   "(default: torch)")  # fmt: skip
    p.add_argument(
        "--quantize", choices=["int8"], default=None,
        help="with --backend onnx: add int8 rows beside the fp32 ones, with the paired "
        "difference and the speed ratio",
    )  # fmt: skip
    p.add_argument("--dims", nargs="+", type=int, default=None, metavar="K",
                   help="sts, retrieval: add rows that keep the first K dimensions of the "
                   "intended row's vectors (L2-normalised again where it normalises), e.g. "
                   "384 256 128 64; each with every --precision")  # fmt: skip
    p.add_argument("--precision", nargs="+", default=None, metavar="P",
                   help="sts, retrieval: add rows storing the vectors as P (float32, float16, "
                   "int8, uint8, binary, ubinary; int8/uint8 ranges calibrated on the data "
                   "compared), scored on the stored form; retrieval: binary also gets a "
                   "+rescore row")  # fmt: skip
    for flag, what in (
        ("--int8-rows", "an int8 twin"),
        ("--budget-rows", "--dims/--precision rows"),
    ):
        p.add_argument(flag, choices=["intended", "all"], default=None, help=f"rows that get "
                       f"{what} (default: the intended row, or all rows when none is intended)")  # fmt: skip
    p.add_argument("--chunk-tokens", nargs="+", type=int, default=None, metavar="N",
                   help="retrieval: add rows of the intended pooling with each document "
                   "whole through windows, and cut into chunks of N tokens, naive (each "
                   "chunk's text alone) and late (pooled from the whole document), a "
                   "document scored by its best chunk; N at most the model's max length "
                   "less its special tokens, e.g. 64 128 254 for all-MiniLM-L6-v2")  # fmt: skip
    p.add_argument("--split", default=None, metavar="NAME",
                   help="retrieval, BEIR folder: qrels/NAME.tsv (default: test, or the only one)")  # fmt: skip
    for name in (*_COLUMNS, "query", "document"):
        p.add_argument(f"--{name}-column", default=name, metavar="C",
                       help=f"column/field of the {name} in table files (default: {name})")  # fmt: skip
    p.add_argument(
        "--model", "-m", dest="models", action="append", default=None, metavar="MODEL",
        help="model directory or hub id; repeat it to score several models' rows in one "
        "table, paired on the same data (vs *: the first model's intended pooling) "
        f"(default: {DEFAULT_MODEL})",
    )  # fmt: skip
    p.add_argument("--max-bytes-per-doc", type=float, default=None, metavar="N",
                   help="retrieval: name the best row storing at most N bytes per document, "
                   "and the rows it cannot be told apart from")  # fmt: skip
    p.add_argument("--max-query-ms", type=float, default=None, metavar="T",
                   help="retrieval: name the best row answering a query in at most T ms, "
                   "and the rows it cannot be told apart from")  # fmt: skip
    add_cache_arguments(p, default=True)
    add_common(p)
    p.set_defaults(func=run)
    return p


_BEIR_READ = f"documents read as {BEIR_JOIN}, ids from _id"


def _output(path: str | None, option: str, suffix: str | None, overwrite: bool) -> Path | None:
    if path is None:
        return None
    out = Path(path)
    if suffix and out.suffix.lower() != suffix:
        raise InputError(arg=option, expected=f"a {suffix} file name", got=path)
    if out.exists() and not overwrite:
        raise InputError(already_exists(f"{option} {path}", fix="--overwrite", state="file exists"))
    if not out.parent.is_dir():
        raise InputError(arg=option, expected="a file in an existing folder",
                         got=f"{path}, whose folder {out.parent} does not exist")  # fmt: skip
    return out


def _check_options(args: argparse.Namespace) -> None:
    """Refuse, in one line, options that the task or backend would not honour."""
    from poolkit.compare.budget import BUDGET_TASKS
    from poolkit.output import PRECISIONS

    if args.folds < 2:
        raise InputError(arg="--folds", expected="at least 2", got=args.folds)
    if args.bootstrap < 0 or args.bootstrap == 1:
        raise InputError(arg="--bootstrap", expected="0 (off) or at least 2", got=args.bootstrap)
    if args.task == "clustering" and args.train:
        raise InputError(arg="--train", expected=f"unset: --task {args.task} has no training step",
                         got=args.train, fix="Drop --train.")  # fmt: skip
    if args.task in ("ner", "relation") and args.prompt_name is not None:
        raise InputError(arg="--prompt-name", expected=f"unset with --task {args.task}, which "
                         "embeds words and spans of the text as written (prompts are for "
                         "sequence tasks)", got=args.prompt_name)  # fmt: skip
    if args.task != "retrieval":
        for flag, value, default in (
            ("--split", args.split, None), ("--query-column", args.query_column, "query"),
            ("--document-column", args.document_column, "document"),
            ("--document-prompt-name", args.document_prompt_name, None),
        ):  # fmt: skip
            if value != default:
                raise InputError(arg=flag, expected="given only for --task retrieval",
                                 got=f"--task {args.task}")  # fmt: skip
    # --dims/--precision/--budget-rows
    stage = "--dims" if args.dims is not None else "--precision" if args.precision else None
    if stage is None and args.budget_rows:
        raise InputError(arg="--budget-rows", expected="given only with --dims or "
                         "--precision (it chooses which rows get them)",
                         got=args.budget_rows, fix="Add one, or drop --budget-rows.")  # fmt: skip
    if stage is not None and args.task not in BUDGET_TASKS:
        raise InputError(arg=stage, expected=f"given only for --task {' and '.join(BUDGET_TASKS)} "
                         "(similarity on the stored vectors)", got=f"--task {args.task}, which "
                         f"trains on float vectors", fix=f"Drop {stage}.")  # fmt: skip
    if stage is not None and args.quantize:
        raise InputError(arg=stage, expected="unset with --quantize (budget rows or int8 model "
                         "rows, one at a time)", got="both", fix="Drop one.")  # fmt: skip
    for k in args.dims or ():
        if k < 1:
            raise InputError(arg="--dims", expected="positive numbers of dimensions", got=k, fix="e.g. --dims 384 256 128 64.")  # fmt: skip
    for p in args.precision or ():
        if p not in PRECISIONS:
            raise InputError(arg="--precision", expected=f"among {', '.join(PRECISIONS)}", got=repr(p), fix="e.g. --precision float32 int8 binary.")  # fmt: skip
    # --chunk-tokens (sizes past the model's text room: refused once it is loaded)
    if args.chunk_tokens is not None and args.task != "retrieval":
        raise InputError(arg="--chunk-tokens", expected="given only for --task retrieval "
                         "(documents scored by their best chunk)", got=f"--task {args.task}, "
                         "which has no documents to chunk")  # fmt: skip
    if args.chunk_tokens is not None and args.quantize:
        raise InputError(arg="--chunk-tokens", expected="unset with --quantize (document rows "
                         "or int8 model rows, one at a time)", got="both", fix="Drop one.")  # fmt: skip
    for n in args.chunk_tokens or ():
        if n < 1:
            raise InputError(arg="--chunk-tokens", expected="chunk sizes of at least 1 token", got=n, fix="e.g. --chunk-tokens 64 128 254.")  # fmt: skip
    # The cost limits and several --model
    for flag, value in (("--max-bytes-per-doc", args.max_bytes_per_doc),
                        ("--max-query-ms", args.max_query_ms)):  # fmt: skip
        if value is not None and args.task != "retrieval":
            what = "documents" if flag == "--max-bytes-per-doc" else "queries"
            raise InputError(arg=flag, expected="given only for --task retrieval (a cost per "
                             "stored document or per query)", got=f"--task {args.task}, which "
                             f"has no {what} to search", fix=f"Drop {flag}.")  # fmt: skip
        if value is not None and not value > 0:
            raise InputError(arg=flag, expected="a positive number", got=f"{value:g}", fix=f"e.g. {flag} 1024.")  # fmt: skip
    models = args.models or []
    for k, m in enumerate(models):
        if m in models[:k]:
            raise InputError(arg="--model", expected="each model once (its rows already cover "
                             "every recipe)", got=f"{m} twice", fix="Drop the repeat.")  # fmt: skip
    if len(models) > 1 and args.quantize:
        raise InputError(arg="--quantize", expected="one --model (int8 rows are for one model "
                         "at a time)", got=f"{args.quantize} with {len(models)} models",
                         fix="Drop --quantize or keep one --model.")  # fmt: skip
    if args.int8_rows and not args.quantize:
        raise InputError(arg="--int8-rows", expected="given only with --backend onnx --quantize "
                         "int8", got=args.int8_rows)  # fmt: skip
    if args.backend in ("onnx", "openvino") and args.layers is not None:
        raise InputError(arg="--layers", expected=f"unset on the {args.backend} backend (it "
                         "returns the last layer only)", got=" ".join(args.layers),
                         fix="Drop --layers or use --backend torch.")  # fmt: skip
    check_backend_args(args)  # --backend, --quantize, --dtype, --device; the extras they need


def run(args: argparse.Namespace) -> int:
    """Run ``compare`` for parsed ``args`` (its errors: one line, by :func:`poolkit.cli.main`)."""
    from poolkit.compare.datasets import Columns, read_task

    models = list(getattr(args, "models", None) or [None])
    args.model = models[0]  # the commands' --model: one row's model (_for_row)
    json_path, plot_path, report_path = (
        _output(getattr(args, flag[2:]), flag, suffix, args.overwrite)
        for flag, suffix in (("--json", ".json"), ("--plot", ".png"), ("--report", ".html"))
    )
    outputs = [p for p in (json_path, plot_path, report_path) if p]  # suffixes keep them apart
    _check_options(args)
    cache = open_cache(args)  # its flags refused here, before any model loads
    if plot_path:
        require_extra("--plot", "matplotlib", "matplotlib", "compare")
    if args.task != "sts":
        require_extra(f"--task {args.task}", "sklearn", "scikit-learn", "compare")
    layers = args.layers
    if layers is not None and not layers:
        layers = ["last", "last4", "first_last"]
    elif layers:
        layers = ["last", *layers]
    columns = Columns(**{name: getattr(args, f"{name}_column") for name in _COLUMNS})
    # Read (and so validate) every file before the model loads.
    if args.task == "retrieval":
        from poolkit.compare.retrieval import read_retrieval

        data: Any = read_retrieval(args.data, args.split, args.query_column, args.document_column,
                                   args.text_column)  # fmt: skip
    else:
        # Clustering reads the classification formats: texts with a label.
        kind = "classification" if args.task == "clustering" else args.task
        data = read_task(kind, args.data, columns)
    # retrieval: --train is a qrels split of the BEIR folder, read once its rows are known
    retrieval = args.task == "retrieval"
    train = read_task(args.task, args.train, columns) if args.train and not retrieval else None
    if args.task == "ner" and train is None:
        raise InputError(arg="--train", expected="a CoNLL FILE with --task ner (it trains the "
                         "tagging probe)", got="none")  # fmt: skip

    from poolkit.compare import report
    from poolkit.compare.budget import BUDGET_TASKS, Budget, base_of
    from poolkit.compare.candidates import candidates
    from poolkit.compare.runner import LEVELS, Settings, check_labels
    from poolkit.layers import layer_spec

    # Unknown recipes, layers and unusable labels fail here, before the model loads. The
    # recipes asked for are parsed here once and handed on as values; without --recipes
    # the defaults (and the model's pooling) are the runner's, so only the layers can fail.
    recipes = None
    hybrids: list[Any] = []
    named: list[Any] = []  # recipes with an output stage: budget rows of their base
    try:
        if args.recipes:
            from poolkit.compare.hybrid import split_hybrids
            from poolkit.compare.sparse_rows import split_extra

            names, hybrids = split_hybrids(args.recipes)  # rrf(A,B), fuse(A,B,W)
            if hybrids and args.task != "retrieval":
                raise InputError(arg="--recipes", expected="no hybrid row with --task "
                                 f"{args.task} (hybrid rows fuse two rows' rankings)",
                                 got=str(hybrids[0]),
                                 fix="Use them with --task retrieval.")  # fmt: skip
            dense, extra = split_extra(names, args.task)  # sparse and BM25 rows
            recipes = candidates(LEVELS[args.task], dense, layers) if dense else []
            layers = None
            # Sequence recipes with an output stage: budget rows of their float32 row.
            named = [r for r in recipes if r.has_output_stage and r.level == "sequence"]
            recipes = [*dict.fromkeys(base_of(r) if r in named else r for r in recipes), *extra]
        for spec in layers or ():
            layer_spec(spec)
    except (TypeError, ValueError) as e:
        raise flagged(e, COMPARE_RECIPES) from None
    if named and args.task not in BUDGET_TASKS:
        raise InputError(arg="--recipes", expected="recipes without an output stage (/TRANSFORM, /DIMS, "
                         f"/PRECISION) for --task {args.task}, which trains on float "
                         f"vectors (it is scored only for --task "
                         f"{' and '.join(BUDGET_TASKS)})", got=str(named[0]),
                         fix="Name the recipe without it.")  # fmt: skip
    fit_texts, fit_dir = _fit_source(args, named)
    retrieval_train = _retrieval_train(args, data) if retrieval and args.train else None
    if named and args.quantize:
        raise InputError(arg="--recipes", expected="no output stage with --quantize (budget "
                         "rows or int8 model rows, one at a time)", got=str(named[0]),
                         fix="Drop one.")  # fmt: skip
    budget = None  # the budget rows: --dims/--precision, and those of `named`
    if args.dims is not None or args.precision is not None or named:
        budget = Budget(tuple(dict.fromkeys(args.dims)) if args.dims else (None,),
                        tuple(dict.fromkeys(args.precision)) if args.precision else ("float32",),
                        args.budget_rows or "intended", tuple(named))  # fmt: skip
    settings = Settings(
        args.task, recipes, layers, args.folds, quiet=args.quiet,
        long_text=args.long_text, bootstrap=args.bootstrap, seed=args.seed,
        backend=args.backend if args.quantize else None,
        int8_rows=args.int8_rows or "intended", prompt_name=args.prompt_name,
        document_prompt_name=args.document_prompt_name, budget=budget,
        chunk_tokens=tuple(args.chunk_tokens or ()), hybrids=tuple(hybrids),
        fit_texts=fit_texts, fit_dir=fit_dir, fit_train=retrieval_train,
    )  # fmt: skip
    check_labels(data, train, settings)
    from poolkit.encoder import Encoder

    start = time.perf_counter()
    encoders = []
    for m in models:
        encoder = Encoder(
            m, device=args.device, dtype=args.dtype, max_length=args.max_length,
            max_batch_tokens=args.batch_tokens, backend=args.backend,
            defer_load=cache is not None,  # states all in the cache: the weights never load
        )  # fmt: skip
        encoder.state_cache = cache
        if encoder.info.pooling_is_guess:
            note = guess_note(encoder.info, "marking {pooling} as intended — check the model card")
            print(f"poolkit: note: {note}", file=sys.stderr)
        encoders.append((m, encoder))
    encoder = encoders[0][1]
    if len(encoders) > 1 and settings.chunk_tokens:  # only models that cut the same chunks
        tokenizer = encoder.tokenizer.backend_tokenizer.to_str()
        for model, other in encoders[1:]:
            if other.tokenizer.backend_tokenizer.to_str() != tokenizer:
                raise InputError(arg="--chunk-tokens", expected="models sharing a tokenizer "
                                 "(chunks of N tokens are the same texts in each, so their chunk "
                                 "rows index the same chunk ids of a corpus document)",
                                 got=f"--model {models[0]} and --model {model}, whose tokenizers "
                                 "differ", fix="Run --chunk-tokens one model at a time.")  # fmt: skip
    quantized = None
    if args.quantize:
        quantized = Encoder(
            args.model, max_length=args.max_length, max_batch_tokens=args.batch_tokens,
            backend="onnx", quantize=args.quantize,
        )  # fmt: skip
        quantized.state_cache = cache
    from poolkit.compare.budget import BudgetError
    from poolkit.compare.documents import ChunkError
    from poolkit.compare.models import compare_models

    try:
        run = compare_models(encoders, data, settings, train, quantized)
    except BudgetError as e:
        raise flagged(e, COMPARE_BUDGET) from None
    except ChunkError as e:
        raise flagged(e, COMPARE_CHUNKS) from None
    results = run.results
    limits: list[dict] = []
    if args.task == "retrieval":
        from poolkit.compare.frontier import mark

        results = mark(results, report.MAIN_METRIC[args.task])
        run = replace(run, results=results)
        limits = _limits(args, run)  # before anything is written: a limit no row meets
    seconds = time.perf_counter() - start
    model = ", ".join(e.info.reference for _, e in encoders)
    boot = (
        report.bootstrap_info(args.task, args.bootstrap, args.seed, len(data))
        if args.bootstrap
        else None
    )
    from poolkit.compare.recommend import answer_json, answer_lines

    def command(r: Any) -> str:
        return row_command(_for_row(args, r), r)

    doc = report.to_json(args.task, model, results, boot, command)
    for row, r in zip(doc["results"], report.rank(results, report.MAIN_METRIC[args.task]),
                      strict=True):  # fmt: skip
        if (line := index_command(_for_row(args, r), r)) is not None:
            row["index_command"] = line
    doc["cache"] = cache_record(cache)
    ranked = report.rank(results, report.MAIN_METRIC[args.task])
    doc = {**dict(list(doc.items())[:3]), "recommended": answer_json(args.task, ranked, command),
           **dict(list(doc.items())[3:])}  # fmt: skip
    answer = answer_lines(args.task, ranked, boot, command)
    if len(models) > 1:  # each as --model named it, the rows' `model` values
        doc["models"] = models
    if limits:
        doc["limits"] = [{k: v for k, v in d.items() if k != "line"} for d in limits]
    if args.task == "retrieval":  # where the query and search times were measured
        from poolkit.compare.cost import hardware

        doc["costs_measured_on"] = measured = {**hardware(encoders[0][1]), "model": model}
        settings.notes.append(
            f"cost columns measured on {measured['model']}, {measured['device']}, "
            f"{measured['cpu']} ({measured['cpu_count']} cores), in this run."
        )
    if _beir(args):
        doc["documents_read_as"] = _BEIR_READ
        settings.notes.append(f"retrieval: {_BEIR_READ}; poolkit embed reads {args.data} "
                              "(or its corpus.jsonl) the same way.")  # fmt: skip
    if json_path:
        report.write_json(json_path, doc)
    if plot_path:
        report.write_plot(plot_path, args.task, model, results)
    infos = {m: e.info for m, e in encoders}
    intended_note = _intended_note(encoder.info, results, args.task, len(infos) > 1)
    unit = {"retrieval": "queries", "ner": "sentences", "sts": "pairs"}.get(args.task, "examples")
    if cache is not None:
        settings.notes.append(cache_line(cache))
    notes = list(dict.fromkeys(settings.notes))
    if report_path:
        from poolkit.compare.html_report import write_report

        page = _page(args, encoder.info, results, boot, data, train, unit, notes, seconds,
                     infos)  # fmt: skip
        write_report(report_path, replace(page, limits=[d["line"] for d in limits], model=model,
                                          answer=answer))  # fmt: skip
    print("\n".join(answer) + "\n", flush=True)  # the answer first, a blank line, the table
    print(report.table(args.task, results, intended_note, boot, args.explain), flush=True)
    for d in limits:
        print(d["line"], flush=True)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"{args.task}: {len(data)} {unit}, {len(results)} rows, {model}, "
        f"{seconds:.1f} s" + "".join(f"; wrote {p}" for p in outputs),
        file=sys.stderr,
    )
    return 0


def _for_row(args: argparse.Namespace, result: Any) -> argparse.Namespace:
    """``args`` with ``--model`` the row's model (several models: each row's own)."""
    if getattr(result, "model", None) is None or result.model == args.model:
        return args
    return argparse.Namespace(**{**vars(args), "model": result.model})


def _limits(args: argparse.Namespace, run: Any) -> list[dict]:
    """--max-bytes-per-doc / --max-query-ms: per limit, the best row within it and the rows
    it cannot be told apart from (``line``: what the terminal prints); a limit no row meets
    is refused, naming the cheapest row."""
    import numpy as np

    from poolkit.compare import frontier, report
    from poolkit.compare.bootstrap import LEVEL
    from poolkit.compare.models import untold_rows

    metric = report.MAIN_METRIC[args.task]
    place = {id(r): i for i, r in enumerate(report.rank(run.results, metric), 1)}
    quality = np.array([r.metrics[metric] for r in run.results])
    out = []
    for flag, limit in (("--max-bytes-per-doc", args.max_bytes_per_doc),
                        ("--max-query-ms", args.max_query_ms)):  # fmt: skip
        if limit is None:
            continue
        what, cost_of, unit = frontier.COSTS[flag]
        cost = frontier.costs(run.results, cost_of)
        i = frontier.best_within(quality, cost, limit)
        if i is None:
            j = frontier.cheapest(cost)
            if j is None:
                raise InputError(arg=flag, expected=f"a limit on a {what} a row of this run has",
                                 got=f"{limit:g}, and no row has one",
                                 fix=f"Drop {flag}.")  # fmt: skip
            cheap = run.results[j]
            raise InputError(arg=flag, expected=f"a limit some row is within (the cheapest is "
                             f"#{place[id(cheap)]} {cheap.label}, {cost[j]:g} {unit})",
                             got=f"{limit:g}", fix=f"Raise {flag} to at least {cost[j]:g}.")  # fmt: skip
        best = run.results[i]
        line = (f"{flag} {limit:g}: best within it #{place[id(best)]} {best.label} "
                f"({cost[i]:g} {unit}; {metric} {quality[i]:.4f})")  # fmt: skip
        untold, level = None, round(100 * LEVEL)
        if args.bootstrap:
            mask = untold_rows(run, i, args.bootstrap, args.seed)
            same = sorted(
                (run.results[k] for k in np.flatnonzero(mask)), key=lambda r: place[id(r)]
            )
            untold = [r.label for r in same]
            tied = ", ".join(f"#{place[id(r)]} {r.label}" for r in same)
            line += (f"; cannot be told apart from {tied} (paired {level}% interval of the "
                     "difference includes 0)" if same else "; every other row differs from it "
                     f"(paired {level}% intervals exclude 0)")  # fmt: skip
        else:
            line += "; no paired test with --bootstrap 0, so no row is said to tie with it"
        out.append({"flag": flag, "limit": limit, "rank": place[id(best)], "model": best.model,
                    "name": best.label, "cost": float(cost[i]), "untold": untold,
                    "line": line + "."})  # fmt: skip
    return out


def _page(
    args: argparse.Namespace, info: Any, results: list, boot: dict | None, data: Any,
    train: Any, unit: str, notes: list[str], seconds: float, infos: dict | None = None,
) -> Any:  # fmt: skip
    """What ``--report`` shows: the table's rows with their commands, and the run."""
    import platform

    from poolkit.compare import report
    from poolkit.compare.html_report import Page

    infos = infos or {}
    commands = []  # each row's embed and export commands (or why none), in rank order
    for r in report.rank(results, report.MAIN_METRIC[args.task]):
        row, decoder = _for_row(args, r), infos.get(r.model, info).is_decoder
        export = None if r.documents else export_command(row, r.recipe, r.quantize, decoder)
        why = "" if export else no_export_reason(r.recipe, r.documents, r.quantize)
        commands.append((row_command(row, r), export, why))
    facts = [("task", args.task), ("data", args.data), ("size", f"{len(data)} {unit}")]
    documents = getattr(data, "doc_ids", None)
    if documents is not None:
        facts.append(("documents", str(len(documents))))
    shown = [r.documents for r in results if r.documents]
    if shown:
        facts.append(("document rows", f"{', '.join(shown)} (the intended pooling); a chunked "
                      "document scores its best chunk's cosine"))  # fmt: skip
    if train is not None:
        facts.append(("train", f"{args.train} ({len(train)} {unit})"))
    elif args.task in ("classification", "relation"):
        facts.append(("probe", f"stratified {args.folds}-fold cross-validation"))
    facts += [
        ("model", ", ".join(i.reference for i in infos.values()) if infos else info.reference),
        ("model folder", str(info.path)),
        ("intended pooling", f"{info.pooling} (from {info.pooling_source})"),
        ("backend", args.backend + (f", with {args.quantize} rows" if args.quantize else "")),
        ("bootstrap", f"{args.bootstrap} resamples, seed {args.seed}" if boot else "off"),
        ("time", f"{seconds:.1f} s"),
        ("python", f"{platform.python_version()} ({platform.platform(terse=True)})"),
    ]
    packages = ["torch", "transformers", "tokenizers", "numpy", "scipy", "scikit-learn"]
    packages += {"onnx": ["onnxruntime"], "openvino": ["openvino"]}.get(args.backend, [])
    if args.quantize:
        packages.append("onnxruntime")
    if args.task == "retrieval" and not _beir(args):  # a BEIR row's commands embed both
        if args.document_prompt_name is not None:
            how = f"with --prompt-name {shlex.quote(args.document_prompt_name)} in its place"
        elif args.prompt_name is not None:
            how = "without --prompt-name (the model's default prompt)"
        else:
            how = "with the same command"
        mark = "; a row with \u00b7 shows its documents' command (its queries: as the * row's)"
        notes = [*notes, f"retrieval: embed writes the queries' vectors; embed the documents "
                 f"{how}{mark if shown else ''}."]  # fmt: skip
    return Page(
        task=args.task, model=info.reference, results=results, bootstrap=boot,
        data=args.data, size=len(data), unit=unit, commands=commands,
        intended_note=_intended_note(info, results, args.task, len(infos) > 1),
        notes=notes, facts=facts,
        versions=installed_versions(*dict.fromkeys(packages)), command=compare_command(args),
    )  # fmt: skip


def _intended_note(info: Any, results: list, task: str, several: bool = False) -> str:
    source = f"{info.pooling}, from {info.pooling_source}"
    if several and any(r.intended for r in results):  # one *: the first model's
        return f"* the first model's intended pooling ({source}); vs *: every row against it"
    if task in ("ner", "relation"):
        return f"(the model's intended pooling, {source}, is a sequence strategy: none marked here)"
    if any(r.intended for r in results):
        return f"* the model's intended pooling ({source})"
    return f"the model's intended pooling ({source}) is not among these candidates"


def hybrid_commands(args: argparse.Namespace, recipe: Any, export: bool = False) -> str:
    """Each side's ``embed`` command of a hybrid row (``export``: its ``export`` command,
    where it has one), as ``NAME: COMMAND`` joined by `` ; ``; a hybrid across models:
    each side with its own ``--model``."""
    from poolkit.compare.hybrid import side_rows

    parts = []
    models = getattr(recipe, "models", ()) or (None, None)  # across models: each side's own
    for (name, r, rescore, documents), model in zip(side_rows(recipe), models, strict=True):
        if model is not None:
            args = argparse.Namespace(**{**vars(args), "model": model})
        if export:
            cmd = None if documents else export_command(args, r)
        elif documents:
            cmd = document_command(args, r, documents)
        else:
            cmd = embed_command(args, r, None, rescore)
        if cmd is not None:
            parts.append(f"{name}: {cmd}")
    return " ; ".join(parts)


def row_command(args: argparse.Namespace, result: Any) -> str:
    """The ``poolkit embed`` command of one result row: :func:`document_command` for a
    document row, both rows' commands for a hybrid row (:func:`hybrid_commands`), else
    :func:`embed_command`."""
    if result.recipe.level == "hybrid":
        return hybrid_commands(args, result.recipe)
    if result.documents:
        return document_command(args, result.recipe, result.documents)
    return embed_command(args, result.recipe, result.quantize, result.rescore, result.fit_file)


def index_command(args: argparse.Namespace, result: Any) -> str | None:
    """The ``poolkit index`` and ``poolkit search`` commands that put a retrieval row's
    documents into a Qdrant index and search it with its queries as the row was scored
    (docs/search-index.md); None for a row the index does not hold (not a BEIR folder, not
    a float sequence row, a document, hybrid, rescored or quantised-model row)."""
    recipe = result.recipe
    if (not _beir(args) or getattr(recipe, "level", None) != "sequence" or recipe.precision
            or result.documents or result.rescore or result.quantize or args.backend != "torch"
            or args.dtype is not None or args.long_text != "truncate"):  # fmt: skip
        return None  # (index embeds float32, truncated: no --dtype, no --long-text yet)
    to = f"index-{_slug(recipe)}"
    parts = ["poolkit", "index", shlex.quote(args.data), "--to", to, "--recipe",
             shlex.quote(str(recipe))]  # fmt: skip
    for flag, value in (("--model", args.model), ("--max-length", args.max_length),
                        ("--fit", result.fit_file if recipe.transform else None),
                        ("--prompt-name", args.document_prompt_name),
                        ("--query-prompt-name", args.prompt_name)):  # fmt: skip
        if value is not None:
            parts += [flag, shlex.quote(str(value))]
    parts += _text_field(args)
    queries = shlex.quote(str(Path(args.data) / "queries.jsonl"))
    return " ".join([*parts, "&&", "poolkit", "search", to, "--queries", queries, "-k", "100",
                     "-o", f"run-{_slug(recipe)}.tsv"])  # fmt: skip


def document_command(args: argparse.Namespace, recipe: Any, documents: str) -> str:
    """The ``poolkit embed`` command that writes a document row's document vectors for the
    documents of CORPUS: ``window`` -> ``--long-text window`` (one vector per document),
    ``naive tokens:N`` -> ``--chunks tokens:N``, ``late tokens:N`` -> ``--chunks tokens:N
    --late`` (one row per chunk, with its span: a table)."""
    kind, _, chunks = documents.partition(" ")
    # A BEIR folder: embed reads its corpus as compare did (title + text, ids from _id).
    corpus = shlex.quote(args.data) if Path(args.data).is_dir() else "CORPUS"
    if kind == "window":
        parts = ["poolkit", "embed", corpus, "-o", "docs.parquet", "--long-text", "window"]
    else:
        parts = ["poolkit", "embed", corpus, "-o", "chunks.parquet", "--chunks", chunks]
        if kind == "late":
            parts.append("--late")
    parts += ["--recipe", shlex.quote(str(recipe)), *_model_flags(args, None)]
    # The documents' prompt, as compare gave it to them (none named: the model's default).
    if args.document_prompt_name is not None:
        parts += ["--prompt-name", shlex.quote(args.document_prompt_name)]
    return " ".join(parts)


def _retrieval_train(args: argparse.Namespace, scored: Any) -> Any:
    """``--train`` with ``--task retrieval``: a qrels split of the BEIR folder DATA (its name,
    ``train``, or its file, ``DATA/qrels/train.tsv``) read with the same corpus; refused in
    one line where it is the split scored or shares a query with it."""
    from poolkit.compare.retrieval import read_retrieval

    given = Path(args.train)
    split = given.stem if given.suffix == ".tsv" else args.train
    if not Path(args.data).is_dir():
        raise InputError(arg="--train", expected="a qrels split of a BEIR folder DATA (its "
                         "train queries and judgements)", got=f"{args.data}, a table",
                         fix="Pass a BEIR folder with qrels/train.tsv.")  # fmt: skip
    if given.suffix == ".tsv" and given.resolve().parent != (Path(args.data) / "qrels").resolve():
        raise InputError(arg="--train", expected=f"a qrels file of {args.data}/qrels (its "
                         "queries and corpus)", got=args.train, fix="Name its split, e.g. "
                         "--train train.")  # fmt: skip
    from poolkit.compare.datasets import DataError

    try:
        train = read_retrieval(args.data, split, args.query_column, args.document_column,
                               args.text_column)  # fmt: skip
    except DataError as e:
        if e.arg != "split":
            raise
        raise e.but(arg="--train") from None
    shared = set(train.query_ids) & set(scored.query_ids)
    if shared:
        raise InputError(arg="--train", expected="train queries none of which is scored",
                         got=f"{len(shared)} shared with the split scored (e.g. "
                         f"{sorted(shared)[0]!r})", fix="Train on another split than --split.")  # fmt: skip
    return train


def _fit_source(args: argparse.Namespace, named: list[Any]) -> tuple[Any, Any]:
    """The fitted rows' texts (``--fit FILE``, read now; None: the task's default) and the
    folder their fits are saved in; refused in one line where no text may be fitted on."""
    from poolkit.compare.fits import FitTexts, check_fit_source, default_fit_dir

    check_fit_source(args.task, named, args.fit, args.train, args.data)
    fitted = any(r.transform is not None for r in named)
    if args.fits_dir is not None and not fitted:
        raise InputError(arg="--fits-dir", expected="given only with a fitted recipe among "
                         "--recipes (e.g. mean/pca128)", got=args.fits_dir,
                         fix="Add one, or drop --fits-dir.")  # fmt: skip
    if not fitted:
        return None, None
    texts = None
    if args.fit is not None:
        from poolkit.cli._output_args import file_texts

        found = [t for part in file_texts(args.fit, args.text_column) for t in part]
        if not found:
            raise InputError(arg="--fit", expected="a file with non-blank texts",
                             got=f"{args.fit}, which has none", fix="Name a file with some "
                             "of your texts.")  # fmt: skip
        texts = FitTexts(found, f"{len(found)} texts of --fit {args.fit}")
    return texts, Path(args.fits_dir) if args.fits_dir is not None else default_fit_dir()


def embed_command(
    args: argparse.Namespace,
    recipe: Any,
    quantize: str | None = None,
    rescore: bool = False,
    fit_file: str | None = None,
) -> str:
    """The ``poolkit embed`` command (word and span rows: the library call) that writes the
    vectors of ``recipe``'s row (``quantize``: a quantised row; ``fit_file``: a fitted
    row's fit, else ``FIT.safetensors``) for the texts of INPUT. Retrieval on a BEIR folder:
    the documents' command, ``&&``, the queries' (a ``+rescore`` row's queries without the
    precision: float queries)."""
    if getattr(recipe, "transform", None) is not None:  # a fitted row: its fit file
        args = argparse.Namespace(**{**vars(args), "row_fit": fit_file or "FIT.safetensors"})
    if recipe.level == "lexical":  # BM25: an index of the documents, no vectors to write
        return (
            f"bm25s.BM25(k1={recipe.k1:g}, b={recipe.b:g}).index(bm25s.tokenize(documents, "
            'stopwords="en"))'
        )
    if recipe.level == "multivector":
        return _multivector_commands(args, recipe, quantize, rescore)
    if recipe.level in ("word", "span"):  # the library call; every other level: the command
        fn = "embed_words(words" if recipe.level == "word" else "embed_spans(texts, char_spans"
        model = "" if args.model is None else f", {args.model!r}"
        return f"poolkit.{fn}{model}, recipe={str(recipe)!r})"
    if _beir(args):
        queries = recipe.replace(precision=None) if rescore else recipe
        prompts = (args.document_prompt_name, _query_prompt_name(args, recipe))
        return " && ".join(_sides(args, recipe, queries, quantize, prompts))
    out = "vectors.npz" if recipe.level == "sparse" else "vectors.npy"
    return _embed(args, recipe, quantize, "INPUT", out, args.prompt_name)


def _query_prompt_name(args: argparse.Namespace, recipe: Any) -> str | None:
    """The queries' ``--prompt-name``: ``query`` for a sparse row of an inference-free
    model, whose queries compare sent through the query route (that name picks it)."""
    if args.prompt_name is not None or recipe.level != "sparse":
        return args.prompt_name
    from poolkit.compare.sparse_rows import query_prompt_name
    from poolkit.model_folder import model_info

    return query_prompt_name(None, model_info(args.model))


def _multivector_commands(
    args: argparse.Namespace, recipe: Any, quantize: str | None, rescore: bool
) -> str:
    """The ``poolkit embed`` commands of a multi-vector row, as compare embedded its sides:
    documents with ``--prompt-name document`` (or the documents' prompt name), queries with
    ``--prompt-name query`` (or the queries' one), each truncated at the folder's lengths
    (no ``--long-text``); a MUVERA ``+rescore`` row: its MUVERA files, then the token files
    its top 100 are reranked with (the recipe without ``/muvera``)."""
    recipes = [recipe, recipe.replace(muvera=None)] if rescore else [recipe]
    prompts = (args.document_prompt_name or "document", args.prompt_name or "query")
    return " && ".join(c for r in recipes for c in _sides(args, r, r, quantize, prompts))


def _sides(
    args: argparse.Namespace, recipe: Any, query_recipe: Any, quantize: str | None,
    prompts: tuple[str | None, str | None],
) -> list[str]:  # fmt: skip
    """The documents' and the queries' ``embed`` commands (``prompts``: their
    ``--prompt-name``s), reading a BEIR folder's files, else DOCUMENTS and QUERIES."""
    beir = _beir(args)
    corpus = args.data if beir else "DOCUMENTS"
    queries = str(Path(args.data) / "queries.jsonl") if beir else "QUERIES"
    slug = _slug(recipe)
    return [_embed(args, recipe, quantize, corpus, f"corpus-{slug}.parquet", prompts[0]),
            _embed(args, query_recipe, quantize, queries, f"queries-{slug}.parquet", prompts[1])]  # fmt: skip


def _embed(
    args: argparse.Namespace, recipe: Any, quantize: str | None, source: str, output: str,
    prompt_name: str | None,
) -> str:  # fmt: skip
    """One ``poolkit embed`` command of a sequence row, reading ``source``; int8/uint8: the
    ranges the row was scored with (``--ranges`` the ``--json`` file, which holds them;
    without one, ``--calibrate`` the data compared)."""
    name = shlex.quote(str(recipe))
    parts = ["poolkit", "embed", shlex.quote(source), "-o", output, "--recipe", name]
    parts += _model_flags(args, quantize)
    if args.long_text != "truncate" and recipe.level != "multivector":
        parts += ["--long-text", args.long_text]
    if prompt_name is not None:
        parts += ["--prompt-name", shlex.quote(prompt_name)]
    if recipe.transform is not None:
        parts += ["--fit", shlex.quote(getattr(args, "row_fit", None) or "FIT.safetensors")]
    return " ".join(parts + _ranges(args, recipe))


def _slug(recipe: Any) -> str:
    """``recipe``'s name as a file name's part."""
    from poolkit._names import file_slug

    return file_slug(recipe)


def _model_flags(args: argparse.Namespace, quantize: str | None) -> list[str]:
    """An embed command's --text-column, --model, --max-length, --dtype and backend, as
    compare ran (``quantize``: a quantised row's)."""
    parts = _text_field(args)
    for flag, value in (("--model", args.model), ("--max-length", args.max_length),
                        ("--dtype", args.dtype)):  # fmt: skip
        if value is not None:
            parts += [flag, shlex.quote(str(value))]
    if quantize:
        return [*parts, "--backend", "onnx", "--quantize", quantize]
    return parts + (["--backend", args.backend] if args.backend != "torch" else [])


def _ranges(args: argparse.Namespace, recipe: Any) -> list[str]:
    """int8/uint8 rows' ranges flags, for embed and export alike: ``--ranges`` the
    ``--json`` file (the exact ranges the row was scored with), else ``--calibrate`` the
    data compared (a BEIR folder's documents, all of them) or FILE."""
    if recipe.precision not in ("int8", "uint8"):
        return []
    if getattr(args, "json", None):
        return ["--ranges", shlex.quote(args.json)]
    if _beir(args):
        return ["--calibrate", shlex.quote(args.data)]
    return ["--calibrate", "FILE"]


def _beir(args: argparse.Namespace) -> bool:
    """Retrieval on a BEIR folder (its corpus is what embed reads too)."""
    return getattr(args, "task", None) == "retrieval" and Path(args.data).is_dir()


def _text_field(args: argparse.Namespace) -> list[str]:
    """``--text-column C`` where a BEIR folder's text field is not ``text``."""
    if _beir(args) and args.text_column != "text":
        return ["--text-column", shlex.quote(args.text_column)]
    return []


def export_command(
    args: argparse.Namespace, recipe: Any, quantize: str | None = None, decoder: bool = False
) -> str | None:
    """The ``poolkit export`` command that writes the model with ``recipe``'s pooling as a
    folder: sentence-transformers where its Pooling module can express the recipe, else
    ONNX (also for decoders, the onnx backend and quantised rows). None for word and span
    rows, which export cannot pool. A ``/PRECISION`` row is an ONNX graph returning the
    stored form; int8/uint8 with the ranges the row was scored with, as its embed command."""
    from poolkit.deploy.stfolder import st_refusal

    if recipe.level == "hybrid":  # each side's model, where a side has one
        return hybrid_commands(args, recipe, export=True) or None
    if recipe.level in ("sparse", "multivector"):
        return _token_export(args, recipe, quantize, decoder)
    if recipe.level != "sequence":
        return None  # export pools whole texts
    parts = ["poolkit", "export"]
    if args.model is not None:
        parts.append(shlex.quote(str(args.model)))
    parts += ["-o", "exported", "--recipe", shlex.quote(str(recipe))]
    if quantize:
        parts += ["--format", "onnx", "--quantize", quantize]
    elif (decoder or args.backend == "onnx" or st_refusal(recipe) is not None
          or recipe.precision is not None):  # fmt: skip
        parts += ["--format", "onnx"]
    ranges = _ranges(args, recipe)
    if ranges[:1] == ["--calibrate"] and ranges[1] != "FILE":
        ranges += _text_field(args)  # export's --text-column is its --calibrate FILE's
    return " ".join(parts + ranges)


def _token_export(
    args: argparse.Namespace, recipe: Any, quantize: str | None, decoder: bool
) -> str | None:
    """The ``poolkit export`` command of a sparse or multi-vector row (a ``SparseEncoder``
    or ``MultiVectorEncoder`` folder; a decoder's multi-vector row: an ONNX graph), as
    ``export --from-compare`` writes it; None where export refuses the recipe."""
    from poolkit.deploy import multivector, sparse

    fmt = "onnx" if decoder and recipe.level == "multivector" else "sentence-transformers"
    check = sparse.check_export if recipe.level == "sparse" else multivector.check_export
    try:
        check(recipe, fmt, quantize)
    except InputError:
        return None
    parts = ["poolkit", "export"]
    if args.model is not None:
        parts.append(shlex.quote(str(args.model)))
    parts += ["-o", "exported", "--recipe", shlex.quote(str(recipe))]
    return " ".join(parts + (["--format", "onnx"] if fmt == "onnx" else []))


def no_export_reason(recipe: Any, documents: str | None, quantize: str | None) -> str:
    """Why a row has no ``poolkit export`` command, in words (:func:`export_command` gave
    None): a document row, a word or span row, BM25, a hybrid of such rows, or a sparse or
    multi-vector recipe export refuses (its one-line reason)."""
    if documents:
        return ("export pools one text up to the max length: this row's documents are "
                "embedded with the command shown")  # fmt: skip
    if recipe.level in ("word", "span"):
        return "export pools whole texts: word and span rows are embedded with the call shown"
    if recipe.level == "lexical":
        return "BM25 has no model to export: its index is built with the call shown"
    if recipe.level == "hybrid":
        return "neither of its two rows has a model folder to export"
    from poolkit.deploy import multivector, sparse

    check = sparse.check_export if recipe.level == "sparse" else multivector.check_export
    try:
        check(recipe, "sentence-transformers", quantize)
    except InputError as e:
        return f"export refuses it: {e}"
    return "not exported"


# What compare_command leaves out: DATA and --task (written first) and the output options.
_NOT_REPEATED = {"data", "task", "json", "plot", "report", "overwrite", "quiet", "debug"}


def compare_command(args: argparse.Namespace) -> str:
    """The ``poolkit compare`` command that scores this table again: every option of
    :func:`add_parser` set to other than its default (its output options left out)."""
    parser = add_parser(argparse.ArgumentParser().add_subparsers())
    parts = ["poolkit", "compare", shlex.quote(args.data), "--task", args.task]
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if (not action.option_strings or action.help == argparse.SUPPRESS or value is None
                or value == action.default or action.dest in _NOT_REPEATED):  # fmt: skip
            continue
        flag = action.option_strings[0]
        values = value if isinstance(value, list) else [value]
        texts = [shlex.quote(f"{v:g}" if isinstance(v, float) else str(v)) for v in values]
        if (
            isinstance(action, argparse._AppendAction) and action.nargs is None
        ):  # --model M --model N
            parts += [x for text in texts for x in (flag, text)]
        else:
            parts += [flag, *texts]
    return " ".join(parts)
