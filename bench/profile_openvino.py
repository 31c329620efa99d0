"""Where OpenVINO static int8 spends a long batch, against this CPU's int8 GEMM rate.

    python bench/profile_openvino.py [--batch 8] [--length 200] [--repeats 20]

Builds (or loads from poolkit's cache) all-MiniLM-L6-v2's OpenVINO static int8 model,
calibrated as bench_speed's ``ov-int8`` (300 STS-B *train* texts), and compiles it twice
with OpenVINO's per-node counters on: as poolkit does (dynamic shapes, one stream, every
thread) and for the fixed shape ``(any batch, length)``. Runs one ``(batch, length)`` batch
of random ids on each, ``repeats`` times in alternation, and prints for each the time per
batch, its compile time and the median time and share of each node type; then the
multiply-accumulates per second reached by the fully connected layers against a large int8
GEMM on the same threads (``torch._int_mm``, 4096 x 1024 x 1024, median of 20), and the
time the batch would take with those layers at the GEMM's rate and the faster of the two
attention subgraphs: a bound on what the same graph on these kernels can gain on long
texts.
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

ATTENTION = "Subgraph"  # OpenVINO's node type for its fused attention


def int8_gemm_rate(threads: int) -> float:
    """Multiply-accumulates per second of a 4096 x 1024 x 1024 int8 GEMM (median of 20)."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randint(-100, 100, (4096, 1024), dtype=torch.int8)
    b = torch.randint(-100, 100, (1024, 1024), dtype=torch.int8)
    torch._int_mm(a, b)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        torch._int_mm(a, b)
        times.append(time.perf_counter() - start)
    return 4096 * 1024 * 1024 / float(np.median(times))


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
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": runner.threads,
              "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True}  # fmt: skip
    requests, compile_s = {}, {}
    for name, shape in (("dynamic", None), ("fixed length", [-1, args.length])):
        model = core.read_model(str(runner.path))
        if shape is not None:
            model.reshape({i.get_any_name(): shape for i in model.inputs})
        start = time.perf_counter()
        requests[name] = core.compile_model(model, "CPU", config).create_infer_request()
        compile_s[name] = time.perf_counter() - start
    ids = np.random.default_rng(0).integers(1000, 20000, (args.batch, args.length))
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if "token_type_ids" in runner.input_names:
        feed["token_type_ids"] = np.zeros_like(ids)
    for request in requests.values():
        for _ in range(5):
            request.infer(feed)
    # Per node type, the median over repeats of its time in one batch (the machine's load
    # comes and goes; a median of each is steadier than a sum).
    samples: dict[str, dict[str, list[float]]] = {
        n: collections.defaultdict(list) for n in requests
    }
    walls: dict[str, list[float]] = {name: [] for name in requests}
    for _ in range(args.repeats):
        for name, request in requests.items():
            start = time.perf_counter()
            request.infer(feed)
            walls[name].append(time.perf_counter() - start)
            batch: collections.Counter[str] = collections.Counter()
            for node in request.profiling_info:
                batch[f"{node.node_type} ({node.exec_type})"] += node.real_time.total_seconds()
            for node_type, seconds in batch.items():
                samples[name][node_type].append(seconds)
    per_type = {
        name: collections.Counter({t: float(np.median(v)) for t, v in types.items()})
        for name, types in samples.items()
    }
    for name, types in per_type.items():
        wall = float(np.median(walls[name]))
        print(f"{name}: batch {args.batch} x {args.length} tokens: {wall * 1e3:.1f} ms median "
              f"({args.batch / wall:.1f} texts/s), {runner.threads} threads, compiled in "
              f"{compile_s[name]:.2f} s; per node type (ms, share):")  # fmt: skip
        profiled = sum(types.values())
        for node_type, seconds in types.most_common(6):
            print(f"  {seconds * 1e3:6.1f}  {100 * seconds / profiled:5.1f}%  {node_type}")

    def total(name: str, prefix: str) -> float:
        return sum(s for n, s in per_type[name].items() if n.startswith(prefix))

    # The model's fully connected layers: Q, K, V, O (4 H^2) and the FFN (2 x 4 H^2) per token.
    hidden, layers = 384, 6
    fc_macs = args.batch * args.length * layers * 12 * hidden * hidden
    fc_seconds = total("dynamic", "FullyConnected")
    peak = int8_gemm_rate(runner.threads)
    print(f"fully connected: {fc_macs / fc_seconds / 1e9:.0f} GMAC/s; int8 GEMM here: "
          f"{peak / 1e9:.0f} GMAC/s ({100 * fc_macs / fc_seconds / peak:.0f}%)")  # fmt: skip
    profiled = sum(per_type["dynamic"].values())
    rest = profiled - fc_seconds - total("dynamic", ATTENTION)
    best = fc_macs / peak + min(total(name, ATTENTION) for name in requests) + rest
    print(f"bound: fully connected at the GEMM's rate + the faster attention + the rest = "
          f"{best * 1e3:.1f} ms against {profiled * 1e3:.1f} ms profiled "
          f"(at most {profiled / best:.2f}x faster)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
