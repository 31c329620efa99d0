"""``poolkit embed INPUT -o OUTPUT_DIR --engine ray``: the same embeddings, on Ray.

INPUT is a file, a folder or a glob of txt/jsonl/csv/tsv/parquet files (or a pyarrow
filesystem URI); OUTPUT_DIR receives Parquet shards with ``id`` (the row id
``poolkit embed`` gives, files taken in sorted order), ``text_id``
(``"<file>:<row in file>"``) and one ``fixed_size_list<float32>[D]`` column per
strategy. Without ``--address`` a local Ray sized to the machine is started; with it,
the job joins that cluster. A local OUTPUT_DIR appears only when complete (written
beside it, checked to hold every id exactly once, then renamed).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from poolkit._errors import count
from poolkit.cli._common import positive, require_extra
from poolkit.cli._recipe_args import parse_layers

__all__ = ["add_arguments", "dispatch", "run"]

_RAY_ONLY = ("address", "workers", "cpus_per_worker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine, --address, --workers, --cpus-per-worker on ``poolkit embed``."""
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


def dispatch(args: argparse.Namespace) -> int | None:
    """Run the Ray engine if asked for (returns its exit status), else ``None``."""
    if getattr(args, "engine", "local") == "ray":
        return run(args)
    for name in _RAY_ONLY:
        if getattr(args, name, None) is not None:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} works with --engine ray only; add --engine ray or drop it.")
    return None


def _check_output(output: str, overwrite: bool) -> None:
    if "://" in output:
        return
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{output}: --engine ray writes a folder of Parquet shards, but this is a file; "
            "name a folder."
        )
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ValueError(
            f"{output}: already exists and is not empty; pass --overwrite to replace it."
        )
    parent = path.resolve().parent
    if not parent.is_dir():
        raise ValueError(f"{output}: folder {str(parent)!r} does not exist.")


def _start_ray(ray: Any, address: str | None, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.INFO
    # --quiet: Ray Data's execution notes (INFO) and the workers' forwarded logs stay out
    # of stderr too, so the command prints only warnings and errors.
    logging.getLogger("ray.data").setLevel(level)
    options: dict[str, Any] = {"logging_level": level, "log_to_driver": not quiet}
    if address is None:
        # Ray sizes a local instance to the CPUs this process may use (cgroups included).
        ray.init(include_dashboard=False, **options)
    else:
        ray.init(address=address, **options)


def _verify(tmp: str, total: int) -> tuple[int, dict[str, int]]:
    """Check the shards hold ids 0..total-1 exactly once; returns (shards, dims)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.dataset as pads

    data = pads.dataset(tmp, format="parquet")
    ids = np.sort(data.to_table(columns=["id"]).column("id").to_numpy())
    if len(ids) != total or not np.array_equal(ids, np.arange(total)):
        missing = total - len(np.unique(ids))
        raise RuntimeError(
            f"Expected the job to write each of the {total} rows once, but it wrote "
            f"{len(ids)} rows ({missing} ids missing); the output was not published."
        )
    dims = {f.name: f.type.list_size for f in data.schema if pa.types.is_fixed_size_list(f.type)}
    return len(data.files), dims


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


def run(args: argparse.Namespace) -> int:
    from poolkit.cli._recipe_args import recipes_from_args
    from poolkit.ray import Corpus, embed_dataset, list_inputs, require_ray

    for value, flag in ((args.workers, "--workers"), (args.cpus_per_worker, "--cpus-per-worker"),
                        (args.chunk_size, "--chunk-size"), (args.batch_tokens, "--batch-tokens"),
                        (args.max_length, "--max-length")):  # fmt: skip
        positive(value, flag)
    if args.resume:
        raise ValueError(
            "--resume works with --engine local only: a Ray job retries failed blocks and "
            "restarts killed workers itself, and publishes OUTPUT_DIR only when complete; "
            "rerun the same command without --resume."
        )
    wanted, _ = recipes_from_args(args)  # the one parse of the pooling flags on this path
    output = os.fspath(args.output).rstrip("/") or "/"
    _check_output(output, args.overwrite)
    list_inputs(args.input, args.input_format)  # input errors before Ray starts
    require_extra("--engine ray", "ray.data", "Ray Data", "ray")
    ray = require_ray()
    if args.address is not None and args.address.startswith("ray://"):
        import importlib.util

        if importlib.util.find_spec("grpc") is None:
            raise ValueError(
                f"--address {args.address}: ray:// addresses need Ray Client: "
                "pip install 'ray[client]' (or run on the cluster with --address auto)."
            )
    if args.quantize is not None and args.backend != "onnx":
        raise ValueError(
            f"--quantize {args.quantize} works with --backend onnx; add --backend onnx."
        )
    if args.address is None:
        # A local cluster is this machine: check the model here, before any actor loads it.
        from poolkit.model_folder import DEFAULT_MODEL, resolve_model

        model_dir = resolve_model(DEFAULT_MODEL if args.model is None else args.model)
        if args.backend == "onnx":
            # Export (and check) once here; every worker then loads it from the same cache
            # entry instead of exporting it again. Remote workers build it from the same key.
            from poolkit.backends.onnx import load_onnx_runner

            load_onnx_runner(model_dir, quantize=args.quantize)

    start = time.perf_counter()
    _start_ray(ray, args.address, args.quiet)
    ray_started = time.perf_counter()
    try:
        context = ray.data.DataContext.get_current()
        context.max_errored_blocks = 0  # a block that fails after its retries fails the job
        context.enable_progress_bars = not args.quiet
        cpus = args.cpus_per_worker or 1
        workers = args.workers or max(1, int(ray.cluster_resources().get("CPU", 1) // cpus))
        corpus = Corpus.scan(args.input, text_column=args.text_column, fmt=args.input_format)
        block = corpus.balanced_block_rows(workers, args.chunk_size)
        options: dict[str, Any] = {
            "long_text": args.long_text, "max_batch_tokens": args.batch_tokens,
            "device": args.device, "dtype": args.dtype, "max_length": args.max_length,
            "backend": args.backend, "quantize": args.quantize,
        }  # fmt: skip
        if wanted is None:  # the model's pooling, shaped by the shorthand flags
            options.update(layers=parse_layers(args.layers), exclude_special=args.exclude_special)
            pooling: dict[str, Any] = {"normalize": args.normalize}
        else:
            pooling = {"recipe": wanted}
        # One Embedder call per read block (batch_size=None): the same texts share a batch
        # in every run, whatever order blocks arrive in, so reruns agree bit for bit.
        # Reads and writes ask for 0 CPUs here: the pool may hold every CPU (spare_cpus=0).
        ds = embed_dataset(
            corpus.dataset(block), args.model, text_column="text", keep_text=False,
            workers=workers, cpus_per_worker=cpus, batch_size=None, spare_cpus=0,
            **pooling, **options,
        )  # fmt: skip
        remote = "://" in output
        target = (
            output
            if remote
            else f"{Path(output).parent}/.{Path(output).name}.{uuid.uuid4().hex[:8]}.tmp"
        )
        try:
            # Zero CPUs: writing must not wait for CPUs that the embedding actors hold.
            try:
                ds.write_parquet(target, ray_remote_args={"num_cpus": 0, "max_retries": 3})
            except Exception as e:
                raise _user_error(e) from None
            shards, dims = _verify(target, corpus.rows)
            if not remote:
                if os.path.isdir(output):
                    shutil.rmtree(output)
                os.replace(target, output)
        finally:
            if not remote and os.path.isdir(target):
                shutil.rmtree(target, ignore_errors=True)
    finally:
        ray.shutdown()
    end = time.perf_counter()
    if not args.quiet:
        total, job = end - start, end - ray_started
        shape = ", ".join(f"{k}={v}" for k, v in dims.items())
        print(
            f"poolkit: {count(corpus.rows, 'text')} -> {output}/ ({count(shards, 'Parquet shard')}) "
            f"[{shape}] in "
            f"{total:.1f} s, {corpus.rows / max(total, 1e-9):.1f} texts/s "
            f"({corpus.rows / max(job, 1e-9):.1f} texts/s after Ray start), "
            f"{count(workers, 'worker')} x {count(cpus, 'CPU')} (Ray)",
            file=sys.stderr,
        )
    return 0
