"""Where OpenVINO static int8 spends a long batch, against this CPU's int8 GEMM rate.

    python bench/profile_openvino.py [--batch 8] [--length 200] [--repeats 20]

Builds (or loads from poolkit's cache) all-MiniLM-L6-v2's OpenVINO static int8 model,
calibrated as bench_speed's ``ov-int8`` (300 STS-B *train* texts), compiles it as
poolkit does (one stream, every thread) with OpenVINO's per-node counters on, and runs
one ``(batch, length)`` batch of random ids ``repeats`` times. Prints the time per batch,
the share of each node type, and the multiply-accumulates per second reached by the
fully connected layers against a large int8 GEMM on the same threads
(``torch._int_mm``, 4096 x 1024 x 1024): how far the matmuls are from this CPU's limit,
which bounds what any runtime of the same graph can gain on long texts.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_speed


def int8_gemm_rate(threads: int) -> float:
    """Multiply-accumulates per second of a 4096 x 1024 x 1024 int8 GEMM (best of 10)."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randint(-100, 100, (4096, 1024), dtype=torch.int8)
    b = torch.randint(-100, 100, (1024, 1024), dtype=torch.int8)
    torch._int_mm(a, b)
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        torch._int_mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 4096 * 1024 * 1024 / best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--batch", type=int, default=8, help="texts per batch (poolkit: 2048 // length)"
    )
    parser.add_argument("--length", type=int, default=200, help="tokens per text")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    import openvino as ov

    from poolkit.encoder import Encoder

    enc = Encoder(bench_speed.model_dir(), backend="openvino", quantize="int8-static",
                  calibrate=bench_speed.calibration_texts())  # fmt: skip
    runner = enc.backend.runner
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(str(runner.path)), "CPU",
        {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": runner.threads,
         "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True},
    )  # fmt: skip
    request = compiled.create_infer_request()
    ids = np.random.default_rng(0).integers(1000, 20000, (args.batch, args.length))
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if "token_type_ids" in runner.input_names:
        feed["token_type_ids"] = np.zeros_like(ids)
    for _ in range(5):
        request.infer(feed)
    per_type: collections.Counter[str] = collections.Counter()
    start = time.perf_counter()
    for _ in range(args.repeats):
        request.infer(feed)
        for node in request.profiling_info:
            per_type[f"{node.node_type} ({node.exec_type})"] += node.real_time.total_seconds()
    wall = (time.perf_counter() - start) / args.repeats
    profiled = sum(per_type.values()) / args.repeats
    print(f"batch {args.batch} x {args.length} tokens: {wall * 1e3:.1f} ms "
          f"({args.batch / wall:.1f} texts/s), {runner.threads} threads; per node type:")  # fmt: skip
    for name, seconds in per_type.most_common(8):
        print(f"  {100 * seconds / args.repeats / profiled:5.1f}%  {name}")
    # The model's fully connected layers: Q, K, V, O (4 H^2) and the FFN (2 x 4 H^2) per token.
    hidden, layers = 384, 6
    fc_macs = args.batch * args.length * layers * 12 * hidden * hidden
    fc_seconds = sum(s for n, s in per_type.items() if n.startswith("FullyConnected"))
    fc_rate = fc_macs / (fc_seconds / args.repeats)
    peak = int8_gemm_rate(runner.threads)
    print(f"fully connected: {fc_rate / 1e9:.0f} GMAC/s; int8 GEMM here: {peak / 1e9:.0f} GMAC/s "
          f"({100 * fc_rate / peak:.0f}%)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
