"""How well ``compare``'s measured search times repeat: ``search_ms`` (and ``query_ms``)
per row over interleaved runs on the same machine.

Runs ``poolkit compare DATA --task retrieval --recipes ... --json`` (all-MiniLM-L6-v2, the
default model) ``--rounds`` times in each of two row orders, interleaved (A B A B ...: a
slow spell of the machine falls on both orders, and an order effect, such as the first
row timed paying for a cold cache, shows as a difference between them). Before any time
is reported the outputs are checked: every run has the same rows with the same nDCG@10.

Prints per row the median ``search_ms`` and ``query_ms`` over all runs, their spread
(min, max) and whether every run is within 20% of the median ("repeats"); the CPU, its
count and the load average before and after (times on a loaded machine spread more).

    python bench/bench_search_time.py [--data tests/data/squad-titled-retrieval] [--rounds 3]

Exit status 1 if the outputs disagree (the times are reported, never judged).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["mean", "cls", "mean/256/int8", "mean/binary", "bm25", "rrf(mean,bm25)"]
WITHIN = 0.20


def _run(data: Path, recipes: list[str], out: Path) -> dict:
    """One ``poolkit compare`` in a fresh process (this tree's poolkit): its JSON."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = Path(sys.executable).parent / "poolkit"  # this environment's console script
    argv = [str(script), "compare", str(data), "--task", "retrieval",
            "--recipes", *recipes, "--bootstrap", "0", "--json", str(out), "--overwrite",
            "--quiet"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"compare failed: {done.stderr.strip()}")
    return json.loads(out.read_text())


def _row_name(row: dict) -> str:
    return row["recipe"] + (" +rescore" if row.get("rescore") else "")


def _load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as f:
        return " ".join(f.read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "tests/data/squad-titled-retrieval")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each row order")
    args = parser.parse_args()
    orders = {"A": RECIPES, "B": RECIPES[::-1]}
    load_before = _load()
    runs: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for name, recipes in orders.items():
                doc = _run(args.data, recipes, Path(tmp) / f"{name}{k}.json")
                runs.append((name, doc))
                print(f"round {k + 1} order {name}: {len(doc['results'])} rows", flush=True)
    load_after = _load()
    # The same rows and scores in every run: only the times may differ.
    scores = [{_row_name(r): r["ndcg_at_10"] for r in doc["results"]} for _, doc in runs]
    agree = all(s == scores[0] for s in scores)
    measured = runs[0][1]["costs_measured_on"]
    print(f"\nCPU: {measured['cpu']} ({measured['cpu_count']} cores), device {measured['device']}; "
          f"load average (1, 5, 15 min) {load_before} before, {load_after} after")  # fmt: skip
    print(
        f"{len(runs)} runs ({args.rounds} per order, interleaved A B ...); outputs agree: {agree}"
    )
    head = f"{'row':<22} {'field':<9} {'median':>9} {'min':>9} {'max':>9} {'A med':>9} {'B med':>9}  repeats within 20%"
    print(head)
    for row in scores[0]:
        for field in ("search_ms", "query_ms"):
            values = {o: [] for o in orders}
            for order, doc in runs:
                (r,) = [x for x in doc["results"] if _row_name(x) == row]
                values[order].append(r[field])
            every = [v for vs in values.values() for v in vs]
            med = statistics.median(every)
            ok = all(abs(v - med) <= WITHIN * med for v in every)
            print(f"{row:<22} {field:<9} {med:9.3f} {min(every):9.3f} {max(every):9.3f} "
                  f"{statistics.median(values['A']):9.3f} {statistics.median(values['B']):9.3f}  "
                  f"{'yes' if ok else 'no'}")  # fmt: skip
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
