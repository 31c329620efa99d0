"""Several models in one ``compare`` run vs each model alone, on a BEIR folder.

The claim under test: scoring a dense, a SPLADE and a multi-vector model in one table
(:func:`poolkit.compare.models.compare_models`) costs at most 1.1x the sum of the three
single-model runs: each model still encodes the distinct queries and documents once,
and the joint bootstrap resamples every row once, as the single runs do.

Models: the tiny random ones of ``tests/tiny_models.py`` (built here, offline) unless
``--model`` names folders (repeat it). Every run scores the same recipes (``--recipes``,
default ``mean cls``); a multi-vector folder's own recipe and a sparse model's own row
take part in its single run as they do in the joint one, so both score the same rows.

Before any time is reported the outputs are checked: every row of the joint run has the
metrics and the bootstrap interval of the same row in its model's single run (the same
resamples: that is what pairs the models).

    python bench/bench_compare_models.py [--data tests/data/stsb-images-retrieval] [--repeats 3]

Prints each run's median wall and CPU time (min, max) and the ratios joint / sum of
singles (target <= 1.1, judged on CPU time, which others' load on a shared machine
disturbs less); exit status 1 if the outputs disagree or the target is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _tiny_models(root: Path) -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import build_family, build_mlm, build_multivector, build_sparse_encoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_family("bert_dense", root / "dense")
        build_sparse_encoder(build_mlm("bert_dense", root / "mlm"), root / "splade")
        build_multivector("bert_dense", root / "colbert")
    return [str(root / n) for n in ("dense", "splade", "colbert")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "tests/data/stsb-images-retrieval")
    parser.add_argument("--model", action="append", default=None, help="a model folder (repeat)")
    parser.add_argument("--recipes", nargs="+", default=["mean", "cls"])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds")
    args = parser.parse_args()

    from poolkit.compare.models import compare_models
    from poolkit.compare.retrieval import read_retrieval
    from poolkit.compare.runner import Settings
    from poolkit.encoder import Encoder
    from poolkit.recipe import Recipe

    tmp = tempfile.TemporaryDirectory()
    models = args.model or _tiny_models(Path(tmp.name))
    data = read_retrieval(args.data)
    encoders = [(m, Encoder(m, device="cpu")) for m in models]
    base = [Recipe.parse(r) for r in args.recipes]

    def settings_for(encoder=None) -> Settings:
        own = getattr(encoder.info, "multivector", None) if encoder is not None else None
        strategies = [*base, Recipe.parse(own)] if own else base
        return Settings("retrieval", strategies, bootstrap=args.bootstrap)

    def run_single(k: int):
        return compare_models([encoders[k]], data, settings_for(encoders[k][1])).results

    def run_joint():
        return compare_models(encoders, data, settings_for()).results

    # Agreement first (also the warm-up).
    joint = {(r.model, r.label.split(":", 1)[1]): r for r in run_joint()}
    ok = True
    for k, (m, _) in enumerate(encoders):
        for r in run_single(k):
            j = joint.get((m, r.label))
            if j is None or j.metrics != r.metrics or j.ci != r.ci:
                print(f"FAIL: {m} {r.label}: joint {j and j.metrics} vs single {r.metrics}")
                ok = False
    if not ok:
        print("FAIL: outputs disagree; speed not reported", file=sys.stderr)
        return 1
    print(f"agreement: {len(joint)} joint rows equal their single-model rows (metrics, intervals)")

    names = [f"single {Path(m).name}" for m, _ in encoders]
    runs = [*((n, lambda k=k: run_single(k)) for k, n in enumerate(names)), ("joint", run_joint)]
    wall: dict[str, list[float]] = {n: [] for n, _ in runs}
    cpu: dict[str, list[float]] = {n: [] for n, _ in runs}
    for _ in range(args.repeats):  # interleaved: load changes hit every run alike
        for n, fn in runs:
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[n].append(time.perf_counter() - start)
            cpu[n].append(time.process_time() - start_cpu)  # every thread of this process
    ratios = {}
    for what, times in (("wall", wall), ("cpu", cpu)):
        med = {k: float(np.median(v)) for k, v in times.items()}
        for k, v in times.items():
            print(f"{what} {k:20s} median {med[k]:6.2f} s (min {min(v):.2f}, max {max(v):.2f})")
        ratios[what] = med["joint"] / sum(med[n] for n in names)
        print(f"{what}: ratio joint / sum of singles {ratios[what]:.3f} (target <= 1.1)")
    # CPU time is the fairer measure on a shared machine (wall time counts others' load).
    return 0 if ratios["cpu"] <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
