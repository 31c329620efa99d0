"""``poolkit embed INPUT -o OUTPUT_DIR --engine ray``: the same embeddings, on Ray.

INPUT is a file, a folder, a glob or a pyarrow filesystem URI; OUTPUT_DIR receives Parquet
shards of ``id`` (``poolkit embed``'s, files in sorted order), ``text_id``
(``"<file>:<row in file>"``) and the columns ``poolkit embed`` writes to a ``.parquet``
file. Without ``--address`` a local Ray sized to the machine is started. A local
OUTPUT_DIR is checkpointed per input file (:mod:`poolkit.io.shardset`), so after
``kill -9``, Ctrl-C (130) or SIGTERM (143) ``--resume`` embeds only the files not
finished, in the blocks of the first run (their size is in the manifest); it appears only
when complete, checked to hold every id.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from poolkit._errors import already_exists, count, unmet, value_error
from poolkit._versions import installed_versions
from poolkit.cli._backend_args import calibration_texts, check_backend_args
from poolkit.cli._cache_args import cache_settings
from poolkit.cli._common import positive, require_extra
from poolkit.cli._job import job_settings, run_job
from poolkit.cli._ray_rows import check_ids, ids_digest, keep_for_ray, rows_setting, user_rows
from poolkit.cli._signals import Terminated
from poolkit.errors import InputError, RunError

__all__ = ["add_arguments", "dispatch", "run"]

_RAY_ONLY = ("address", "workers", "cpus_per_worker", "gpus_per_worker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine, --address, --workers, --cpus-per-worker, --gpus-per-worker on
    ``poolkit embed``."""
    group = parser.add_argument_group("engine (--engine ray: see docs/scaling.md)")
    group.add_argument("--engine", choices=["local", "ray"], default="local",
                       help="local: this process; ray: a Ray cluster, OUTPUT a folder of "
                       "Parquet shards (needs pip install 'poolkit[ray]') (default: local)")  # fmt: skip
    group.add_argument("--address", default=None, metavar="ADDR",
                       help="Ray cluster to join: auto, or ray://host:port "
                       "(default: start a local Ray sized to this machine)")  # fmt: skip
    group.add_argument("--workers", type=int, default=None, metavar="N",
                       help="model replicas (Ray actors); default: cluster CPUs // "
                       "--cpus-per-worker")  # fmt: skip
    group.add_argument("--cpus-per-worker", type=int, default=None, metavar="C",
                       help="CPUs (torch threads) per worker (default: 1)")  # fmt: skip
    group.add_argument("--gpus-per-worker", type=float, default=None, metavar="G",
                       help="GPUs per worker (Ray's num_gpus; 0.5 puts two workers on a GPU); "
                       "refused where no GPU is visible (default: none, CPUs only)")  # fmt: skip


def dispatch(args: argparse.Namespace, wanted: Any, plan: Any = None) -> int | None:
    """The Ray engine's exit status if asked for (``wanted``: the flags' recipes, None: the
    model's; ``plan``: --chunks' ChunkPlan or None), else ``None``."""
    if getattr(args, "engine", "local") == "ray":
        return run(args, wanted, plan)
    for name in _RAY_ONLY:
        if getattr(args, name, None) is not None:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} works with --engine ray only; add --engine ray or drop it.")
    return None


def check_gpu_args(args: argparse.Namespace) -> None:
    """--gpus-per-worker checked before Ray starts: a positive number, a backend and a
    --device that run on a GPU, and (for a local cluster) a GPU this machine can see."""
    gpus = args.gpus_per_worker
    if gpus is None:
        return
    if not gpus > 0:
        value_error("--gpus-per-worker", "a positive number of GPUs (e.g. 1, or 0.5)", gpus)
    if args.backend != "torch":
        raise InputError(f"--gpus-per-worker: --backend {args.backend} runs on the CPU; drop "
                         "--gpus-per-worker, or use --backend torch.")  # fmt: skip
    if args.device not in ("auto", "cuda", None):
        raise InputError(f"--gpus-per-worker with --device {args.device}: Ray shows each worker "
                         "its own GPUs as cuda; pass --device auto or cuda.")  # fmt: skip
    if args.address is None:
        import torch

        if not torch.cuda.is_available():
            raise InputError(no_gpu(gpus, "this machine has no CUDA GPU visible to PyTorch"))


def no_gpu(gpus: float, why: str) -> str:
    """The one line refusing --gpus-per-worker where no GPU is visible."""
    return (f"--gpus-per-worker {gpus:g}: {why}; drop --gpus-per-worker to run the workers "
            "on CPUs, or run where a GPU is.")  # fmt: skip


def cluster_gpus(args: argparse.Namespace, resources: dict[str, float]) -> str:
    """With --gpus-per-worker, refuse a cluster without enough GPU resource for one worker;
    returns the summary's " + G GPU" part ("" without the flag)."""
    gpus = args.gpus_per_worker
    if gpus is None:
        return ""
    have = float(resources.get("GPU", 0))
    if have <= 0:
        raise InputError(no_gpu(gpus, "the Ray cluster has no GPU resource"))
    if gpus > have:
        raise InputError(f"--gpus-per-worker {gpus:g}: the Ray cluster has {have:g} GPUs in all; "
                         f"ask for at most {have:g}.")  # fmt: skip
    return f" + {gpus:g} GPU"


def default_workers(resources: dict[str, float], cpus: int, gpus: float | None) -> int:
    """--workers by default: the cluster's CPUs // --cpus-per-worker, and with GPUs no more
    than its GPUs // --gpus-per-worker (at least one)."""
    workers = int(resources.get("CPU", 1) // cpus)
    if gpus:
        workers = min(workers, int(resources.get("GPU", 0) / gpus + 1e-9))
    return max(1, workers)


def _start_ray(ray: Any, address: str | None, quiet: bool) -> bool:
    """Join the Ray cluster at ``address`` (None: start a local one); returns whether this
    call connected (and so disconnects at the end). A process already connected (a caller
    that is a Ray driver runs the command in-process) keeps its connection: an ``address``
    of another cluster is refused in one line."""
    level = logging.WARNING if quiet else logging.INFO
    # --quiet: Ray Data's execution notes (INFO) and the workers' forwarded logs stay out
    # of stderr too, so the command prints only warnings and errors.
    logging.getLogger("ray.data").setLevel(level)
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in (None, "auto", current):
            raise InputError(f"--address {address}: this process is already connected to the "
                             f"Ray cluster at {current}; drop --address, or run poolkit as "
                             "a process of its own.")  # fmt: skip
        return False
    # ray.init installs its own SIGTERM handler (sys.exit(15)): put poolkit's back, so that
    # SIGTERM stops the job the Ctrl-C way (checkpoint kept, exit status 143).
    previous = signal.getsignal(signal.SIGTERM)
    try:
        # A local Ray is sized to the CPUs this process may use (cgroups included).
        local = {"include_dashboard": False} if address is None else {"address": address}
        ray.init(logging_level=level, log_to_driver=not quiet, **local)
    except SystemExit as e:  # Ray's handler fired while Ray was starting
        if e.code == signal.SIGTERM:
            raise Terminated from None
        raise
    finally:
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)
    return True


def _widths(schema: Any) -> dict[str, int]:
    """Vector width per recipe column of the shards (ragged: a token's; sparse: the
    vocabulary, from the record)."""
    import json

    import pyarrow as pa

    dims: dict[str, int] = {}
    for f in schema:
        kind = f.type.value_type if pa.types.is_large_list(f.type) else f.type
        if pa.types.is_fixed_size_list(kind):
            dims[f.name] = kind.list_size
    record = json.loads((schema.metadata or {}).get(b"poolkit", b"{}"))
    for name, column in (record.get("columns") or {}).items():
        if column.get("kind") == "sparse":
            dims[name] = column["vocab_size"]
        elif column.get("dims"):  # an output stage's: the dimensions kept (packed bits too)
            dims[name] = column["dims"]
    return dims


def shard_rows(
    table: Any, wanted: Any, ranges: dict[str, Any], plan: Any, fits: dict[str, Any] | None = None
) -> Any:
    """A shard's ``table`` as one machine writes it: each row's own id in ``id``
    (:func:`~poolkit.cli._ray_rows.user_rows`), and the record written beside an output
    stage or chunks (:func:`~poolkit.cli._output_args.output_metadata`: ``--ranges`` reads
    a shard as a local file; ``fits``: the fitted transforms' fits, by recipe)."""
    import json

    from poolkit.cli._output_args import kept_dims
    from poolkit.output import stage_record

    table = user_rows(table)
    record = None
    if any(r.has_output_stage for r in (wanted or {}).values()):
        by_name = {n: (fits or {})[str(r.fitted)] for n, r in wanted.items()
                   if r.fitted is not None}  # fmt: skip
        record = stage_record(wanted, kept_dims(_widths(table.schema), wanted), ranges, by_name)
    if plan is not None:
        record = plan.metadata(record)
    if record is None:
        return table
    meta = {**(table.schema.metadata or {}), b"poolkit": json.dumps(record).encode()}
    return table.replace_schema_metadata(meta)


def _user_error(error: BaseException) -> BaseException:
    """The error poolkit raised inside a worker (Ray wraps it, with a remote traceback),
    so that the CLI prints its one line; other errors as they are."""
    seen = error
    for _ in range(8):
        inner = getattr(seen, "cause", None) or seen.__cause__
        if inner is None or inner is seen:
            break
        seen = inner
    return seen if isinstance(seen, (ValueError, TypeError)) else error


def _model_dir(args: argparse.Namespace) -> Path | None:
    """The model directory: resolved (so checked) for a local cluster; with ``--address``
    only when ``--model`` is a local folder (a hub id may exist on the cluster only, and is
    never downloaded here just to be fingerprinted), else None."""
    from poolkit.model_folder import DEFAULT_MODEL, resolve_model

    ref = DEFAULT_MODEL if args.model is None else os.fspath(args.model)
    if args.address is None or Path(ref).expanduser().is_dir():
        return resolve_model(ref)
    return None  # recorded by name only


def _stored_block_rows(output: str) -> int | None:
    """``block_rows`` of an existing work directory's manifest (None if unreadable)."""
    import json

    from poolkit.io.checkpoint import work_dir_for

    try:
        manifest = json.loads((work_dir_for(output) / "manifest.json").read_text("utf-8"))
        value = manifest["settings"]["block_rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


# Single-file outputs of the local engine: a Ray OUTPUT_DIR named so is refused.
_FILE_SUFFIXES = (".npy", ".npz", ".jsonl", ".json", ".csv", ".tsv", ".txt")


def _checked_output(args: argparse.Namespace, output: str) -> bool:
    """Check OUTPUT_DIR and its work directory before Ray starts; True when a resumed job
    had already published it (its leftover work directory is then removed)."""
    from poolkit.io.checkpoint import check_no_work_dir
    from poolkit.io.shardset import ShardCheckpoint

    if "://" in output:
        if args.resume:
            raise InputError(
                f"{output}: --resume with --engine ray needs a local OUTPUT_DIR (the "
                "checkpoint lives beside it); write locally, or rerun without --resume."
            )
        return False
    if args.resume and not args.overwrite and ShardCheckpoint.finished(output):
        if os.path.isdir(output):
            ShardCheckpoint.remove(output)
            print(f"poolkit: {output} was already complete; removed its work directory.",
                  file=sys.stderr)  # fmt: skip
            return True
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise InputError(
            f"{output}: --engine ray writes a folder of Parquet shards, but this is a file; "
            "name a folder."
        )
    if path.suffix.lower() in _FILE_SUFFIXES and not path.is_dir():
        # A folder named like a file would be a surprise (`-o x.npy` exiting 0 with no x.npy).
        raise InputError(
            f"{output}: --engine ray writes a folder of Parquet shards, not a {path.suffix} "
            f"file; name a folder (e.g. {path.with_suffix('')}/), or drop --engine ray."
        )
    if path.is_dir() and any(path.iterdir()) and not args.overwrite:
        raise InputError(
            already_exists(output, fix="--overwrite", state="already exists and is not empty")
        )
    if not path.resolve().parent.is_dir():
        raise InputError(f"{output}: folder {str(path.resolve().parent)!r} does not exist.")
    if not args.resume:
        check_no_work_dir(output, ShardCheckpoint)
    return False


def _resolve(
    args: argparse.Namespace, wanted: Any, plan: Any, model_dir: Path | None
) -> tuple[Any, dict[str, Any]]:
    """The recipes the workers get (with --dims/--precision the model's intended one) and
    their int8/uint8 ranges, computed once as on one machine, so every worker quantises
    alike. Where the model is here (``model_dir``), the checks a worker makes as it starts
    run here first, one line each (a worker failing to start prints a Ray traceback after
    Ray's retries): the job's plan (its family's checks: a sparse recipe's head, the
    prompt, the model's modules after pooling, --dims' width), and with --chunks the chunk
    size and late recipes."""
    from poolkit.cli._output_args import (
        check_output_widths,
        output_ranges,
        wants_output_stage,
        wants_ranges,
    )
    from poolkit.cli._recipe_args import intended_recipes

    ranges = wants_ranges(args, wanted)
    encoder = job = None
    if model_dir is not None or (ranges and args.ranges is None):  # --calibrate: as locally
        from poolkit.embedding import get_encoder

        encoder = get_encoder(args.model, device=args.device, dtype=args.dtype,
                              max_length=args.max_length, backend=args.backend,
                              quantize=args.quantize, max_batch_tokens=args.batch_tokens,
                              calibrate=args.calibration)  # fmt: skip
        recipes = intended_recipes(wanted, encoder.info, args)
        # The plan every worker makes as it starts (poolkit.ray.prepare), in the flags' words.
        job = check_output_widths(args, encoder, recipes)
        if plan is not None:
            from poolkit.cli._chunk_args import PartChunker

            PartChunker(plan, encoder, recipes)
    if wanted is None and wants_output_stage(args, None):
        from poolkit.model_folder import model_info

        wanted = intended_recipes(None, encoder.info if encoder else model_info(args.model), args)
    if not ranges:
        return wanted, {}
    options = {"long_text": args.long_text, "prompt_name": args.prompt_name,
               "prompt": args.prompt, "pipeline": "pooled" if args.pooled_only else "full"}  # fmt: skip
    return wanted, output_ranges(args, encoder, wanted, [], plan=job, **options)


def run(args: argparse.Namespace, wanted: Any, plan: Any = None) -> int:
    from poolkit.ray import Corpus, list_inputs, require_ray

    positive(args.workers, "--workers")
    positive(args.cpus_per_worker, "--cpus-per-worker")
    keep = keep_for_ray(args)
    output = os.fspath(args.output).rstrip("/") or "/"
    if _checked_output(args, output):
        return 0
    list_inputs(args.input, args.input_format)  # input errors before Ray starts
    require_extra("--engine ray", "ray.data", "Ray Data", "ray")
    ray = require_ray()
    if args.address is not None and args.address.startswith("ray://"):
        import importlib.util

        if importlib.util.find_spec("grpc") is None:
            raise InputError(
                f"--address {args.address}: ray:// addresses need Ray Client: "
                "pip install 'ray[client]' (or run on the cluster with --address auto)."
            )
    from poolkit.cli._output_args import wants_ranges

    check_backend_args(args, output_ranges=wants_ranges(args, wanted))
    check_gpu_args(args)
    if args.quantize == "int8-static" and args.calibrate is None:
        raise InputError("--quantize int8-static with --engine ray needs --calibrate FILE (every "
                         "worker must calibrate on the same texts); add --calibrate FILE.")  # fmt: skip
    args.calibration = calibration_texts(args, None)
    remote = "://" in output
    # A local cluster is this machine: the model is checked here, before any actor loads it.
    model_dir = _model_dir(args)
    wanted, ranges = _resolve(args, wanted, plan, model_dir)
    if args.address is None and args.backend == "onnx":
        # Export (and check) once here; every worker then loads it from the same cache
        # entry instead of exporting it again. Remote workers build it from the same key.
        from poolkit.backends.onnx import load_onnx_runner

        load_onnx_runner(model_dir, quantize=args.quantize)
    elif args.address is None and args.backend == "openvino":
        from poolkit.encoder import Encoder

        Encoder(model_dir, device="cpu", dtype=args.dtype, max_length=args.max_length,
                backend="openvino", quantize=args.quantize, calibrate=args.calibration)  # fmt: skip

    start = time.perf_counter()
    connected = _start_ray(ray, args.address, args.quiet)
    ray_started = time.perf_counter()
    try:
        context = ray.data.DataContext.get_current()
        context.max_errored_blocks = 0  # a block that fails after its retries fails the job
        context.enable_progress_bars = not args.quiet
        cpus = args.cpus_per_worker or 1
        resources = ray.cluster_resources()
        gpus = cluster_gpus(args, resources)
        workers = args.workers or default_workers(resources, cpus, args.gpus_per_worker)
        corpus = Corpus.scan(args.input, text_column=args.text_column, fmt=args.input_format,
                             id_column=args.id_column or "auto", keep_columns=keep)  # fmt: skip
        check_ids(corpus)  # before any model loads, one line naming the row
        block = corpus.balanced_block_rows(workers, args.part_size)
        job = _Job(args, corpus, wanted, workers, cpus, ranges=ranges, plan=plan)
        if remote:
            shards, dims = job.write_remote(output, block)
            resumed = 0
        else:
            if args.resume:
                block = _stored_block_rows(output) or block
            settings = job.settings(model_dir, block)
            outcome = job.write_checkpointed(output, block, settings)
            if isinstance(outcome, int):
                return outcome  # interrupted: the line is printed
            shards, dims, resumed = outcome
    finally:
        if connected:
            ray.shutdown()
    end = time.perf_counter()
    if not args.quiet:
        total, spent = end - start, end - ray_started
        shape = ", ".join(f"{k}={v}" for k, v in dims.items())
        done = corpus.rows - resumed
        note = f"; {count(resumed, 'text')} resumed from the checkpoint" if resumed else ""
        print(
            f"poolkit: {count(corpus.rows, 'text')} -> {output}/ ({count(shards, 'Parquet shard')}) "
            f"[{shape}] in "
            f"{total:.1f} s, {done / max(total, 1e-9):.1f} texts/s "
            f"({done / max(spent, 1e-9):.1f} texts/s after Ray start), "
            f"{count(workers, 'worker')} x {count(cpus, 'CPU')}{gpus} (Ray){note}",
            file=sys.stderr,
        )
    return 0


class _Job:
    """One ``--engine ray`` job over a scanned corpus: the dataset, and its two outputs."""

    def __init__(
        self, args: argparse.Namespace, corpus: Any, wanted: Any, workers: int, cpus: int, *,
        ranges: dict[str, Any], plan: Any,
    ) -> None:  # fmt: skip
        self.args, self.corpus, self.wanted = args, corpus, wanted
        self.workers, self.cpus = workers, cpus
        self.ranges, self.plan = ranges, plan  # resolved once, shipped to the workers

    def dataset(self, block: int, only: set[int] | None = None) -> Any:
        from poolkit.ray import embed_dataset

        args = self.args
        options: dict[str, Any] = {
            "long_text": args.long_text, "max_batch_tokens": args.batch_tokens,
            "device": args.device, "dtype": args.dtype, "max_length": args.max_length,
            "backend": args.backend, "quantize": args.quantize,
            "calibrate": getattr(args, "calibration", None),
            "prompt_name": args.prompt_name, "prompt": args.prompt,
            "pipeline": "pooled" if args.pooled_only else "full",
        }  # fmt: skip
        if self.ranges:
            options["calibration"] = self.ranges
        if getattr(args, "fits", None):  # read once here, shipped to every worker
            options["fits"] = args.fits
        if args.cache:  # each worker's own token states, in its machine's cache root
            options["cache"] = cache_settings(args)
        if self.plan is not None:  # one row per chunk: the local engine's PartChunker
            from poolkit.cli._ray_chunks import ChunkEmbedder

            options.update(fn=ChunkEmbedder, plan=self.plan)
        if self.wanted is None:  # the model's pooling, shaped by the shorthand flags
            # The spec as typed: each Recipe reads it (poolkit.layers.layer_spec); the CLI
            # checked it before the cluster started (embed's recipes_from_args).
            options.update(layers=args.layers, exclude_special=args.exclude_special,
                           normalize=args.normalize)  # fmt: skip
        else:
            options["recipe"] = self.wanted
        # One Embedder call per read block (batch_size=None): the same texts share a batch
        # in every run, whatever order blocks arrive in, so reruns agree bit for bit.
        # Reads and writes ask for 0 CPUs here: the pool may hold every CPU (spare_cpus=0).
        return embed_dataset(
            self.corpus.dataset(block, only), args.model, text_column="text", keep_text=False,
            workers=self.workers, cpus_per_worker=self.cpus, batch_size=None, spare_cpus=0,
            gpus_per_worker=args.gpus_per_worker or 0, **options,
        )  # fmt: skip

    def settings(self, model_dir: Path | None, block: int) -> dict[str, Any]:
        """The manifest settings (:func:`~poolkit.cli._job.job_settings`): the values asked of
        the workers (``block_rows`` is read back on --resume: a resized cluster is no change)."""
        from poolkit.io.checkpoint import model_fingerprint, texts_digest

        args, wanted = self.args, self.wanted
        if wanted is None:  # the model's pooling, shaped by the shorthand flags
            pooling: dict[str, Any] = {"recipes": None, "layers": args.layers,
                                       "exclude_special": args.exclude_special,
                                       "normalize": args.normalize}  # fmt: skip
        else:
            pooling = {"recipes": {name: str(r) for name, r in wanted.items()}}
        head = {"engine": "ray", "model": args.model,
                "model_files": None if model_dir is None else model_fingerprint(model_dir),
                **pooling, "prompt_name": args.prompt_name, "prompt": args.prompt,
                "pooled_only": args.pooled_only}  # fmt: skip
        engine = {"max_length": args.max_length, "batch_tokens": args.batch_tokens,
                  "calibration": None if args.calibration is None else texts_digest(args.calibration),
                  "input_format": args.input_format,
                  "device": args.device, "gpus_per_worker": args.gpus_per_worker,
                  "block_rows": block}  # fmt: skip
        rows = rows_setting(self.corpus)
        if rows is not None:  # a resumed job must read the same ids and fields
            head["rows"] = rows
        if self.ranges:  # ... quantise with the same ranges
            head["output_ranges"] = {n: c.digest() for n, c in self.ranges.items()}
        if getattr(args, "fits", None):  # ... transform with the same fits
            head["fits"] = {n: f.digest() for n, f in args.fits.items()}
        if self.plan is not None:  # ... and cut the same chunks
            head["chunks"] = self.plan.settings()
        versions = installed_versions("torch", "transformers", "onnxruntime", "ray")
        return job_settings(args, head, engine, versions)

    def write_remote(self, output: str, block: int) -> tuple[int, dict[str, int]]:
        """Ray's own Parquet writer straight into a remote OUTPUT_DIR (no checkpoint)."""
        ds = self.dataset(block).map_batches(
            shard_rows, batch_format="pyarrow", batch_size=None, num_cpus=0,
            fn_kwargs={"wanted": self.wanted, "ranges": self.ranges, "plan": self.plan,
                       "fits": getattr(self.args, "fits", None)},
        )  # fmt: skip
        try:
            # Zero CPUs: writing must not wait for CPUs that the embedding actors hold.
            ds.write_parquet(output, ray_remote_args={"num_cpus": 0, "max_retries": 3})
        except Exception as e:
            raise _user_error(e) from None
        return self.verify(output)

    def verify(self, path: str) -> tuple[int, dict[str, int]]:
        """Check the shards under ``path`` hold ids 0..rows-1 exactly once (the rows' own ids:
        that many distinct ones; with chunks, each id on the rows of its chunks, so at least
        once); returns (shards, dims)."""
        import numpy as np
        import pyarrow.dataset as pads

        total = self.corpus.rows
        data = pads.dataset(path, format="parquet")
        ids = data.to_table(columns=["id"]).column("id")
        if self.plan is not None:  # one row per chunk: the documents' ids, each on consecutive rows
            ids = ids.unique()
        if self.corpus.id_type is not None:
            wrong = len(ids) != total or len(ids.unique()) != total
        else:
            ids = np.sort(ids.to_numpy())
            wrong = len(ids) != total or not np.array_equal(ids, np.arange(total))
        if wrong:
            missing = total - len(np.unique(np.asarray(ids)))
            raise RunError(
                unmet(
                    f"the job to write each of the {total} rows once",
                    f"it wrote {len(ids)} rows ({missing} ids missing)",
                    "The output was not published.",
                )
            )
        return len(data.files), _widths(data.schema)

    def write_checkpointed(
        self, output: str, block: int, settings: dict[str, Any]
    ) -> tuple[int, dict[str, int], int] | int:
        """Embed the input files not finished in OUTPUT_DIR's work directory, shard by shard,
        then publish OUTPUT_DIR. Returns (shards, dims, texts resumed), or the exit status
        after Ctrl-C/SIGTERM (130/143, one line printed, checkpoint kept)."""
        from poolkit.cli._ray_resume import file_stamps, split_by_file
        from poolkit.io.inputstamp import InputStamp
        from poolkit.io.shardset import ShardCheckpoint

        corpus = self.corpus
        changed = [InputStamp.take(f.path) for f in corpus.files]  # before hashing
        own = corpus.ids or [None] * len(corpus.files)
        stamps = [
            {"name": f.name, "first_id": first, "rows": rows, **digest, "ids": ids_digest(ids)}
            for f, first, rows, digest, ids in zip(
                corpus.files, corpus.offsets, corpus.counts, file_stamps(corpus.files), own,
                strict=True,
            )
        ]  # fmt: skip
        checkpoint = ShardCheckpoint.open(output, settings, resume=self.args.resume)

        resumed: list[bool] = []  # per input file: done before this run

        def work() -> Iterator[tuple[int, int, Any]]:
            resumed[:] = checkpoint.keep(stamps, changed)
            pending = {k for k, done in enumerate(resumed) if not done}
            if pending:
                try:
                    for batch in self.dataset(block, pending).iter_batches(
                        batch_size=None, batch_format="pyarrow"
                    ):
                        for k, first, table in split_by_file(batch, corpus.offsets):
                            yield k, first, shard_rows(table, self.wanted, self.ranges,
                                                       self.plan, getattr(self.args, "fits",
                                                                          None))  # fmt: skip
                except Exception as e:
                    raise _user_error(e) from None

        def finish() -> tuple[int, dict[str, int]]:
            if missing := [f.name for f in corpus.files if f.name not in checkpoint.done_files]:
                raise RunError(unmet(f"the job to embed every row of {len(corpus.files)} files",
                                     f"{len(missing)} came back incomplete",
                                     "The output was not published."))  # fmt: skip
            staged = checkpoint.stage([f.name for f in corpus.files])
            shards_count, dims = self.verify(os.fspath(staged))
            checkpoint.publish(overwrite=self.args.overwrite)
            return shards_count, dims

        def kept(failed: bool) -> str | None:
            # Counted on disk: a record an interrupt cut short after its rename counts.
            if failed and not checkpoint.done_files:
                return None
            return f"{count(checkpoint.records_on_disk(), 'finished input file')} kept"

        blocks = work()
        try:
            outcome = run_job(checkpoint, blocks, finish, kept)
        finally:
            # Close Ray Data's iterator now, while Ray is up: left to the garbage collector
            # after ray.shutdown(), its cleanup meets a shut-down worker, and Ray ends the
            # process with status 1 instead of the 130/143 of an interrupted job.
            blocks.close()
        if isinstance(outcome, int):
            return outcome  # interrupted: the line is printed
        texts = sum(rows for rows, done in zip(corpus.counts, resumed, strict=True) if done)
        return (*outcome, texts)
