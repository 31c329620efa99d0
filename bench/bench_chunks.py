"""What late chunking costs: ``embed_chunks(late=True)`` against whole-document windows
(``embed(long_text="window")``) and naive chunks, on long documents.

Documents: ``bench/_data.long_documents`` (STS-B sentences joined into documents of 600-1500
tokens of the default model, from ``../shared/data``). Model: the default
(all-MiniLM-L6-v2, 256 tokens: windows of 254 text tokens, step 127, so consecutive windows
share 127 tokens, the default ``stride``). Three contenders, interleaved, each timed after
a quarter second idle:

- ``window``: :func:`poolkit.embed` with ``long_text="window"``, one vector per document;
- ``late``: :func:`poolkit.embed_chunks` with ``tokens:SIZE`` and ``late=True``: the same
  windows, then each chunk pooled from the document's token vectors;
- ``naive``: :func:`poolkit.embed_chunks` with ``tokens:SIZE``: each chunk's text alone.

Before any time, on the first 8 documents: each late chunk vector equals the mean of the
chunk's token rows of ``embed_tokens(long_text="window")`` (then L2-normalised, as the
model does), and each naive chunk vector equals ``embed`` of the chunk's text. Memory: the
peak resident size (``ru_maxrss``) after late chunking a quarter of the documents, then all
of them (flat in the number of documents: the rise is the output, not the work). Target:
late / window <= 1.1 (median of the rounds).

    python bench/bench_chunks.py [--docs 1000] [--rounds 3] [--size 128] [--threads 2]

Prints the CPU and the load average (the machine may be shared), medians with min and max,
and the ratios; exit status 1 if outputs disagree or the target is missed.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import long_documents
from bench_budget import cpu_line, interleaved, spread


def agree(documents: list[str], encoder: object, size: int) -> bool:
    """Late and naive chunk vectors against their definitions, on ``documents``."""
    from poolkit import embed, embed_chunks, embed_tokens

    chunker = f"tokens:{size}"
    late = embed_chunks(documents, chunker, model=encoder, late=True)
    naive = embed_chunks(documents, chunker, model=encoder)
    rows = embed_tokens(documents, model=encoder, long_text="window")
    worst_late = worst_naive = 0.0
    for doc, lc, nc, tv in zip(documents, late, naive, rows, strict=True):
        off = tv.offsets
        for k, (a, b) in enumerate(lc.spans.tolist()):
            sel = (off[:, 1] > off[:, 0]) & (off[:, 0] < b) & (off[:, 1] > a)
            ref = tv.vectors[sel].mean(axis=0)
            ref /= np.linalg.norm(ref)
            worst_late = max(worst_late, float(np.abs(lc.vectors[k] - ref).max()))
        ref = embed(nc.texts(doc), model=encoder)
        worst_naive = max(worst_naive, float(np.abs(nc.vectors - ref).max()))
    ok = worst_late < 1e-5 and worst_naive < 1e-5
    print(f"agreement on {len(documents)} documents: late = mean of window token rows "
          f"(max |diff| {worst_late:.1e}); naive = embed(chunk texts) ({worst_naive:.1e}): "
          f"{'ok' if ok else 'FAIL'}")  # fmt: skip
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=128, help="chunk size in tokens")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    import poolkit
    from poolkit import Encoder, embed, embed_chunks

    torch.set_num_threads(args.threads)
    documents = long_documents(args.docs)
    encoder = Encoder(None, device="cpu")
    lengths = [len(x) for x in encoder.tokenize(documents).ids]
    w = encoder.text_room
    print(cpu_line())
    print(f"poolkit {poolkit.__version__}, torch {torch.__version__}, threads {args.threads}; "
          f"{len(documents)} documents of {min(lengths)}-{max(lengths)} tokens (mean "
          f"{np.mean(lengths):.0f}); windows of {w} text tokens, step {w // 2} (overlap "
          f"{w - w // 2}); chunks tokens:{args.size}")  # fmt: skip
    if not agree(documents[:8], encoder, args.size):
        print("FAIL: outputs disagree; times not reported", file=sys.stderr)
        return 1

    chunker = f"tokens:{args.size}"
    quarter = documents[: max(1, len(documents) // 4)]
    out = embed_chunks(quarter, chunker, model=encoder, late=True)
    peak_quarter = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size_quarter = sum(c.vectors.nbytes + c.spans.nbytes for c in out) / 2**20
    del out
    out = embed_chunks(documents, chunker, model=encoder, late=True)
    peak_all = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size_all = sum(c.vectors.nbytes + c.spans.nbytes for c in out) / 2**20
    chunks = sum(len(c.spans) for c in out)
    del out
    print(f"memory: peak RSS {peak_quarter:.0f} MiB after {len(quarter)} documents "
          f"(output {size_quarter:.1f} MiB), {peak_all:.0f} MiB after {len(documents)} "
          f"(output {size_all:.1f} MiB, {chunks} chunks): +{peak_all - peak_quarter:.0f} MiB")  # fmt: skip

    fns = {
        "window": lambda: embed(documents, model=encoder, long_text="window"),
        "late": lambda: embed_chunks(documents, chunker, model=encoder, late=True),
        "naive": lambda: embed_chunks(documents, chunker, model=encoder),
    }
    start = time.perf_counter()
    times = interleaved(fns, args.rounds, settle=0.25)
    for name, t in times.items():
        print(f"    {name:7s} {spread(t, 1.0, 's')}")
    med = {k: float(np.median(v)) for k, v in times.items()}
    ratio = med["late"] / med["window"]
    print(f"late / window: {ratio:.3f} (target <= 1.1); naive / late: "
          f"{med['naive'] / med['late']:.3f}; {args.rounds} rounds in "
          f"{time.perf_counter() - start:.0f} s; {cpu_line()}")  # fmt: skip
    return 0 if ratio <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
