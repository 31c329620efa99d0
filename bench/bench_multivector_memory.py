"""Memory of a multi-vector ``poolkit embed`` job against the corpus size: flat, or not.

``poolkit embed corpus.txt -o tokens.EXT --recipe multivector:tokens`` (the default model,
all-MiniLM-L6-v2: its last hidden states, 384 float32 values per token) runs as its own
process on 5,000 and 50,000 texts (``--sizes``), lines cycling through the 3000 STS-B dev
sentences (``bench/_data.py``, ~16 tokens each), part by part (``--part-size``, default
4096). Reported per run: the process's peak resident memory (``ru_maxrss`` of that child,
from ``os.wait4``), the wall time, the output's size and its token count. Memory is flat
when the peak does not grow with the corpus while the output does: a part's token vectors
are held at a time, the ragged ``.npz`` streams its flat matrix through a temporary file,
the ragged Parquet writes one row group a part.

    python bench/bench_multivector_memory.py [--sizes 5000 50000] [--formats npz parquet]

Timings are whatever the machine gives (the load average is printed); the memory figures
do not depend on it. Exit status 1 if a job fails or the largest corpus' peak is more than
1.25x the smallest's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import line_file
from bench_budget import cpu_line


def run_job(folder: Path, n: int, fmt: str, part_size: int) -> dict[str, float]:
    """One ``poolkit embed`` process over ``n`` texts: its peak RSS (MiB), wall seconds,
    output size (MiB) and tokens written."""
    source = folder / f"corpus-{n}.txt"
    if not source.exists():
        line_file(source, n)
    out = folder / f"tokens-{n}.{fmt}"
    argv = [sys.executable, "-m", "poolkit.cli", "embed", str(source), "-o", str(out),
            "--recipe", "multivector:tokens", "--part-size", str(part_size), "--quiet",
            "--overwrite"]  # fmt: skip
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"poolkit embed failed ({proc.returncode}): {err}")
    size = out.stat().st_size / 2**20
    if fmt == "npz":
        with np.load(out) as z:
            tokens = int(z["offsets"][-1])
    else:
        import pyarrow.parquet as pq

        column = pq.read_table(out, columns=["multivector:tokens"]).column(0)
        tokens = sum(len(chunk.flatten()) for chunk in column.chunks)
    out.unlink()
    return {"peak_mib": usage.ru_maxrss / 1024, "wall_s": wall, "output_mib": size,
            "tokens": tokens}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--formats", nargs="+", default=["npz", "parquet"],
                        choices=["npz", "parquet"])  # fmt: skip
    parser.add_argument("--part-size", type=int, default=4096)
    args = parser.parse_args()
    print(cpu_line(), flush=True)
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-mv-memory-", dir=".") as tmp:
        for fmt in args.formats:
            peaks = []
            for n in args.sizes:
                r = run_job(Path(tmp), n, fmt, args.part_size)
                peaks.append(r["peak_mib"])
                print(f"{fmt:8s} {n:6d} texts: peak RSS {r['peak_mib']:7.0f} MiB, output "
                      f"{r['output_mib']:7.0f} MiB ({r['tokens']} tokens x 384 float32), "
                      f"{r['wall_s']:6.0f} s, {n / r['wall_s']:5.1f} texts/s", flush=True)  # fmt: skip
            ratio = peaks[-1] / peaks[0]
            print(f"{fmt}: peak at {args.sizes[-1]} texts / at {args.sizes[0]}: {ratio:.3f}x")
            failed |= ratio > 1.25
        print(cpu_line())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
