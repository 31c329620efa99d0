"""What assembling the output from memory saves: a checkpointed job's writes, two ways.

A job of ``--parts`` parts of 4096 x 384 float32 (the default part of a MiniLM job) goes
through :class:`poolkit.io.checkpoint.Checkpoint` as ``poolkit embed`` drives it: each part
committed (``.npz``, SHA-256, fsync), then ``publish``. *streamed*: as shipped, each part is
appended to the output from memory as it is committed, and publish only closes and renames
it. *read back*: the same commits, then the work directory reopened (``resume=True``) and
published, which reads every part back from its file and hashes it again: what every job
did before the output was assembled as it went (and what a resumed job still does for the
parts it finds done). Rounds interleave the two; the outputs must be byte-identical before a
time is printed.

Run: ``PYTHONPATH=src python bench/bench_assembly.py [--rounds 7] [--parts 20] [--format npy]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_budget import cpu_line


def job(root: Path, name: str, parts: list[np.ndarray], read_back: bool) -> tuple[float, bytes]:
    from poolkit.io.checkpoint import Checkpoint, texts_digest

    settings = {"strategies": ["mean"]}
    out = root / name
    t = time.perf_counter()
    cp = Checkpoint.open(out, settings, resume=False)
    for k, vecs in enumerate(parts):
        cp.commit(k, k * len(vecs), texts_digest([str(k)]), {"mean": vecs})
    if read_back:
        cp.close()
        cp = Checkpoint.open(out, settings, resume=True)
    cp.publish(len(parts), overwrite=False)
    seconds = time.perf_counter() - t
    data = out.read_bytes()
    out.unlink()
    return seconds, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--parts", type=int, default=20)
    parser.add_argument("--format", choices=["npy", "parquet", "jsonl"], default="npy")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((4096, 384)).astype(np.float32) for _ in range(args.parts)]
    root = Path(tempfile.mkdtemp(prefix="bench-assembly-", dir=os.environ.get("TMPDIR")))
    times: dict[str, list[float]] = {"streamed": [], "read back": []}
    try:
        for r in range(args.rounds):
            outputs = []
            for kind in ("streamed", "read back") if r % 2 == 0 else ("read back", "streamed"):
                seconds, data = job(root, f"out.{args.format}", parts, kind == "read back")
                times[kind].append(seconds)
                outputs.append(data)
            assert outputs[0] == outputs[1], "the two ways wrote different bytes"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mb = args.parts * 4096 * 384 * 4 / 1e6
    print(cpu_line())
    print(f"{args.parts} parts x 4096 x 384 float32 ({mb:.0f} MB) -> .{args.format}, "
          f"{args.rounds} interleaved rounds, commits + publish, median (min-max):")  # fmt: skip
    for kind, values in times.items():
        print(
            f"  {kind:9s} {statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"
        )


if __name__ == "__main__":
    main()
