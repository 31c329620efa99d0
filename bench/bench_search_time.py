"""How well ``compare``'s measured search times repeat: ``search_ms`` (and ``encode_ms``,
the query's encoding; their sum is the row's ``query_ms``) per row over interleaved runs on
the same machine.

Runs ``poolkit compare DATA --task retrieval --recipes ... --json`` (all-MiniLM-L6-v2, the
default model) ``--rounds`` times in each of two row orders, interleaved (A B A B ...: a
slow spell of the machine falls on both orders, and an order effect, such as the first
row timed paying for a cold cache, shows as a difference between them). Before any time
is reported the outputs are checked: every run has the same rows with the same nDCG@10.

Prints per row, over all runs, the median ``search_ms`` and ``encode_ms``, their spread
(max/min ratio, interquartile range as a share of the median), each order's median, and
whether the row repeats within 20% (max/min <= 1.2: every run within 20% of every other);
how ``search_ms`` was timed (the JSON's ``costs_measured_on.search_timing``), the CPU, its
count and the load average before and after (times on a loaded machine spread more).
``encode_ms`` (one timed pass of the queries through the model) is reported, not judged.

``--scale K`` (default 1: the folder as it is) runs on a larger corpus written to a
temporary BEIR folder: the folder's queries and judgements, its documents, and K - 1
perturbed copies of each (its words in a seeded random order, new ids, never judged), so
each search scans K times the documents.

    python bench/bench_search_time.py [--data tests/data/squad-titled-retrieval] [--rounds 3] [--scale 1]

Exit status 1 if the outputs disagree (the times are reported, never judged).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
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


def _scaled(data: Path, scale: int, folder: Path) -> Path:
    """The BEIR folder ``data`` with ``scale - 1`` perturbed copies of each document."""
    folder.mkdir()
    shutil.copy(data / "queries.jsonl", folder / "queries.jsonl")
    shutil.copytree(data / "qrels", folder / "qrels")
    rng = random.Random(0)
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as out:
        for doc in docs:
            out.write(json.dumps(doc) + "\n")
        for k in range(1, scale):
            for doc in docs:
                words = doc["text"].split()
                rng.shuffle(words)
                copy = {**doc, "_id": f"{doc['_id']}~{k}", "text": " ".join(words)}
                out.write(json.dumps(copy) + "\n")
    return folder


def _spread(values: list[float]) -> tuple[float, float, float]:
    """Median, max/min ratio and interquartile range / median of ``values``."""
    med = statistics.median(values)
    q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (med, med, med)
    ratio = max(values) / min(values) if min(values) > 0 else float("inf")
    return med, ratio, (q3 - q1) / med if med > 0 else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "tests/data/squad-titled-retrieval")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each row order")
    parser.add_argument("--scale", type=int, default=1, help="documents x this (a BEIR folder)")
    args = parser.parse_args()
    if args.scale < 1 or (args.scale > 1 and not args.data.is_dir()):
        parser.error("--scale: a whole number >= 1; > 1 needs --data to be a BEIR folder")
    orders = {"A": RECIPES, "B": RECIPES[::-1]}
    load_before = _load()
    runs: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = _scaled(args.data, args.scale, Path(tmp) / "data") if args.scale > 1 else args.data
        for k in range(args.rounds):
            for name, recipes in orders.items():
                doc = _run(data, recipes, Path(tmp) / f"{name}{k}.json")
                runs.append((name, doc))
                print(f"round {k + 1} order {name}: {len(doc['results'])} rows", flush=True)
    load_after = _load()
    # The same rows and scores in every run: only the times may differ.
    scores = [{_row_name(r): r["ndcg_at_10"] for r in doc["results"]} for _, doc in runs]
    agree = all(s == scores[0] for s in scores)
    measured = runs[0][1]["costs_measured_on"]
    print(
        f"\ndata: {args.data}" + (f" x {args.scale} (perturbed copies)" if args.scale > 1 else "")
    )
    print(f"search_ms timing: {measured.get('search_timing', 'one timed search (before #43)')}")
    print(f"CPU: {measured['cpu']} ({measured['cpu_count']} cores), device {measured['device']}; "
          f"load average (1, 5, 15 min) {load_before} before, {load_after} after")  # fmt: skip
    print(
        f"{len(runs)} runs ({args.rounds} per order, interleaved A B ...); outputs agree: {agree}"
    )
    print(f"{'row':<22} {'field':<9} {'median':>9} {'max/min':>8} {'IQR/med':>8} "
          f"{'A med':>9} {'B med':>9}  repeats within 20%")  # fmt: skip
    for row in scores[0]:
        for field in ("search_ms", "encode_ms"):
            values: dict[str, list[float]] = {o: [] for o in orders}
            for order, doc in runs:
                (r,) = [x for x in doc["results"] if _row_name(x) == row]
                values[order].append(r.get(field, r.get("query_ms")))  # before #55: query_ms
            med, ratio, iqr = _spread([v for vs in values.values() for v in vs])
            verdict = ("yes" if ratio <= 1 + WITHIN else "no") if field == "search_ms" else "-"
            print(f"{row:<22} {field:<9} {med:9.4f} {ratio:8.2f} {iqr:8.1%} "
                  f"{statistics.median(values['A']):9.4f} {statistics.median(values['B']):9.4f}  "
                  f"{verdict}")  # fmt: skip
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
