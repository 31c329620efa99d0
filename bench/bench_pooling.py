"""Time poolkit's sequence pooling against sentence-transformers' Pooling module.

One run, same tensors: a (128, 256, 768) float32 batch with random lengths (right
padding), mean and max. Results are checked to agree before any time is reported.

    python bench/bench_pooling.py [--batch 128 --length 256 --hidden 768 --repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from poolkit import sequence_embedding


def timeit(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time in milliseconds over ``repeat`` calls after two warm-ups."""
    fn()
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    try:  # sentence-transformers >= 6: the old path still works but warns
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:
        from sentence_transformers.models import Pooling  # type: ignore[no-redef]

    rng = np.random.default_rng(args.seed)
    lengths = rng.integers(1, args.length + 1, size=args.batch)
    mask_np = (np.arange(args.length)[None, :] < lengths[:, None]).astype(np.int64)
    hidden_np = rng.standard_normal((args.batch, args.length, args.hidden), dtype=np.float32)
    hidden, mask = torch.from_numpy(hidden_np), torch.from_numpy(mask_np)

    print(
        f"shape {tuple(hidden.shape)} float32, lengths {lengths.min()}-{lengths.max()} "
        f"(mean {lengths.mean():.0f}), torch threads {torch.get_num_threads()}"
    )
    print(
        f"{'strategy':<8} {'sentence-transformers':>22} {'poolkit torch':>14} "
        f"{'ratio':>7} {'poolkit numpy':>14} {'ratio':>7}"
    )
    floor = timeit(lambda: hidden.sum(dim=1), args.repeat)
    for mode in ("mean", "max"):
        st = Pooling(args.hidden, pooling_mode=mode)

        def peer(st: Pooling = st) -> torch.Tensor:
            with torch.inference_mode():
                return st({"token_embeddings": hidden, "attention_mask": mask})[
                    "sentence_embedding"
                ]

        def ours(mode: str = mode) -> torch.Tensor:
            with torch.inference_mode():
                return sequence_embedding(hidden, mask, mode)

        def ours_np(mode: str = mode) -> np.ndarray:
            return sequence_embedding(hidden_np, mask_np, mode)

        expected = peer().numpy()
        for got in (ours().numpy(), ours_np()):
            diff = float(np.abs(got - expected).max())
            if diff > 1e-5:
                raise SystemExit(f"{mode}: outputs disagree (max abs diff {diff:.2e})")
        t_peer, t_ours, t_np = (timeit(f, args.repeat) for f in (peer, ours, ours_np))
        print(
            f"{mode:<8} {t_peer:>19.2f} ms {t_ours:>11.2f} ms {t_peer / t_ours:>6.1f}x "
            f"{t_np:>11.2f} ms {t_peer / t_np:>6.1f}x"
        )
    print(f"reference: a plain hidden.sum(dim=1) over the padded tensor takes {floor:.2f} ms")


if __name__ == "__main__":
    main()
