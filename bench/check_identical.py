"""Are the vectors of every recipe bit-identical between two trees? (issue #37's check)

Writes, for the tree on ``PYTHONPATH``, a SHA-256 per output array: all-MiniLM-L6-v2 through
``embed`` (every sequence strategy, layer mixes, the output stage, a prompt, windows),
``embed_chunks`` (naive and late), ``embed_words``, ``embed_spans``, ``embed_tokens``, and
tiny random families (MPNet/BERT dense, a SPLADE and a multi-vector folder built offline by
``tests/tiny_models.py``). Only the public API's ``recipe=`` is used, so the same script runs
on an older tree. Run it in each tree and compare the two files:

    PYTHONPATH=OLD/src python bench/check_identical.py --out /tmp/old.json
    PYTHONPATH=NEW/src python bench/check_identical.py --out /tmp/new.json
    python bench/check_identical.py --compare /tmp/old.json /tmp/new.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TEXTS = [
    "John works at Google in Mountain View.",
    "A man is playing a guitar on a stage tonight, and the crowd sings along.",
    "Short.",
    "Représentation des phrases — naïve café, Zürich. " * 30,  # past the max length
]
SEQUENCE = ["cls", "mean", "max", "min", "sum", "mean_sqrt_len", "weighted_mean", "last",
            "cls+mean", "mean_no_special", "max_no_special", "mean@last4", "mean@-1,-2:concat",
            "cls@first_last", "mean/raw", "mean/l2", "mean/256", "mean/128/float16",
            "mean/binary", "mean/ubinary", "cls/64/binary", "mean@last4/200/ubinary"]  # fmt: skip
CALIBRATED = ["mean/int8", "mean/128/int8", "max/uint8"]
WORDS = ["first", "last", "mean", "max", "endpoints", "word:mean@last4"]
SPANS = ["endpoints", "mean", "max", "diff_sum", "x,y,x*y", "span:mean@last4"]


def digest(value: Any) -> str:
    """SHA-256 of an array, a list of arrays, a sparse matrix or a list of pairs."""
    h = hashlib.sha256()

    def add(x: Any) -> None:
        if hasattr(x, "toarray"):
            x = x.toarray()
        if isinstance(x, list | tuple):
            for y in x:
                add(y)
            return
        if hasattr(x, "vectors"):  # DocumentChunks / TokenVectors
            add(np.asarray(getattr(x, "spans", getattr(x, "offsets", None))))
            add(x.vectors if not isinstance(x.vectors, dict) else list(x.vectors.values()))
            return
        a = np.ascontiguousarray(x)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())

    add(value)
    return h.hexdigest()


def minilm_hashes() -> dict[str, str]:
    import poolkit
    from poolkit import embed, embed_chunks, embed_spans, embed_tokens, embed_words

    enc = poolkit.Encoder(None)
    out: dict[str, str] = {}
    for r in SEQUENCE:
        out[f"embed {r}"] = digest(embed(TEXTS, enc, recipe=r))
    for r in CALIBRATED:
        out[f"embed {r}"] = digest(embed(TEXTS, enc, recipe=r, calibration=TEXTS))
    out["embed list"] = digest(list(embed(TEXTS, enc, recipe=["cls", "mean", "max"]).values()))
    out["embed window"] = digest(embed(TEXTS, enc, recipe="mean", long_text="window"))
    out["embed prompt"] = digest(embed(TEXTS, enc, recipe="mean", prompt="query: "))
    out["embed pooled"] = digest(embed(TEXTS, enc, recipe="mean", pipeline="pooled"))
    for late in (False, True):
        for r in ("mean", "max/128/binary"):
            got = embed_chunks(TEXTS, "tokens:16", enc, recipe=r, late=late)
            out[f"chunks late={late} {r}"] = digest(got)
    out["chunks sentences"] = digest(embed_chunks(TEXTS, "sentences", enc, recipe="mean"))
    words = [t.split() for t in TEXTS[:3]]
    for r in WORDS:
        out[f"words {r}"] = digest(embed_words(words, enc, recipe=r))
    spans = [[(0, 4), (14, 20)], [(2, 5), (6, 13), (0, 20)], [(0, 5)]]
    for r in SPANS:
        out[f"spans {r}"] = digest(embed_spans(TEXTS[:3], spans, enc, recipe=r))
    out["tokens"] = digest(embed_tokens(TEXTS, enc))
    return out


def _built(root: Path, name: str, build: Any) -> Path:
    """``root/name``, built once: the builders' random Dense weights are not seeded, so
    both trees must read the same folders."""
    folder = root / name
    if not folder.is_dir():
        build(folder)
    return folder


def tiny_hashes(root: Path) -> dict[str, str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import tiny_models as tm

    from poolkit import embed

    out: dict[str, str] = {}
    for name in ("mpnet", "bert_dense", "qwen3"):
        folder = _built(root, name, lambda d, n=name: tm.build_family(n, d))
        for r in ("mean", "cls", "max@first_last/16/binary"):
            out[f"{name} {r}"] = digest(embed(TEXTS, str(folder), recipe=r))
        for r in ("cls+max", "mean_no_special"):
            got = embed(TEXTS, str(folder), recipe=r, pipeline="pooled")
            out[f"{name} {r} pooled"] = digest(got)
        out[f"{name} intended"] = digest(embed(TEXTS, str(folder)))
    mlm = _built(root, "mlm", lambda d: tm.build_mlm("bert_dense", d))
    sparse = _built(root, "splade", lambda d: tm.build_sparse_encoder(mlm, d))
    for r in ("splade", "splade/top8"):
        out[f"sparse {r}"] = digest(embed(TEXTS, str(sparse), recipe=r))
    mv = _built(root, "mv", lambda d: tm.build_multivector("roberta", d))
    for r in ("multivector:tokens", "multivector:tokens/pool2", "multivector:tokens/muvera"):
        for side in ("query", "document"):
            out[f"mv {r} {side}"] = digest(embed(TEXTS, str(mv), recipe=r, prompt_name=side))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    p.add_argument(
        "--models",
        type=Path,
        default=Path(tempfile.gettempdir()) / "poolkit-same",
        help="where the tiny folders are built once and read by both trees",
    )
    args = p.parse_args()
    if args.compare:
        old, new = (json.loads(f.read_text()) for f in args.compare)
        differ = sorted(k for k in old if old[k] != new.get(k))
        print(f"{len(old)} arrays; {len(old) - len(differ)} bit-identical; differ: {differ}")
        sys.exit(1 if differ or set(old) != set(new) else 0)
    import warnings

    warnings.simplefilter("ignore")
    hashes = minilm_hashes() | tiny_hashes(args.models)
    args.out.write_text(json.dumps(hashes, indent=1))
    print(f"{len(hashes)} arrays hashed -> {args.out}")


if __name__ == "__main__":
    main()
