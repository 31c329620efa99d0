"""Text sets for the benchmarks, built from the read-only data in ``../shared/data``.

- ``stsb_dev()``: the 1500 STS-B dev pairs; ``stsb_sentences()`` flattens them to 3000 texts
  (all sentence1 then all sentence2), ~16 tokens each. ``stsb_train_sentences()``: the same
  for STS-B train, for calibrating static quantisation (disjoint from the evaluation texts).
- ``long_texts(tokenizer)``: 1000 texts of 150-250 tokens. Text ``k`` starts at SST-2 train
  sentence ``(7 * k) mod 6920`` and joins the following sentences (file order, wrapping around,
  one space between) until its token count (with [CLS]/[SEP]) reaches a target that cycles
  deterministically through 150..250; a sentence that would push it past 250 ends the text if
  it already has 150 tokens and is skipped otherwise. SST-2
  has ~150k tokens in all, so neighbouring texts overlap; that is fine for a throughput set.
- ``line_file(path, n)``: writes ``n`` lines cycling through the STS-B sentences, for the
  streaming-memory part of the benchmark.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def data_dir() -> Path:
    """The data sets: ``$POOLKIT_TEST_DATA`` (as for the tests) or ``../shared/data``."""
    path = Path(os.environ.get("POOLKIT_TEST_DATA") or DATA).resolve()
    if not path.is_dir():
        raise SystemExit(f"benchmark data not found: expected {path} (set POOLKIT_TEST_DATA)")
    return path


def stsb(split: str) -> list[tuple[float, str, str]]:
    """STS-B ``split`` ("dev" or "train") as ``(score, sentence1, sentence2)``; lines carry 7+
    tab fields, keep the first 7."""
    rows = []
    with (data_dir() / "stsb" / f"sts-{split}.csv").open(encoding="utf-8", newline="") as fh:
        for fields in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
            fields = fields[:7]
            rows.append((float(fields[4]), fields[5], fields[6]))
    return rows


def stsb_dev() -> list[tuple[float, str, str]]:
    """STS-B dev as ``(score, sentence1, sentence2)``."""
    return stsb("dev")


def stsb_sentences() -> list[str]:
    """The 3000 STS-B dev sentences: every sentence1, then every sentence2."""
    rows = stsb_dev()
    return [r[1] for r in rows] + [r[2] for r in rows]


def stsb_train_sentences() -> list[str]:
    """The 11498 STS-B train sentences (every sentence1, then every sentence2), for calibration:
    never the evaluation texts."""
    rows = stsb("train")
    return [r[1] for r in rows] + [r[2] for r in rows]


def sst2_sentences() -> list[str]:
    """SST-2 train sentences in file order, label stripped."""
    lines = (data_dir() / "sst2" / "stsa.binary.train").read_text(encoding="utf-8").splitlines()
    return [line.split(" ", 1)[1] for line in lines if " " in line]


def long_texts(tokenizer: Any, n: int = 1000, low: int = 150, high: int = 250) -> list[str]:
    """``n`` texts of ``low``..``high`` tokens (with special tokens), built as the module docstring says."""
    sents = sst2_sentences()
    counts = [len(ids) - 2 for ids in tokenizer(sents, add_special_tokens=True)["input_ids"]]
    texts = []
    for k in range(n):
        target = low + (k * 37) % (high - low + 1)
        i, parts, length = (7 * k) % len(sents), [], 2
        while length < target:
            if length + counts[i] <= high:
                parts.append(sents[i])
                length += counts[i]
            elif length >= low:
                break  # the next sentence does not fit and the text is long enough
            i = (i + 1) % len(sents)
        texts.append(" ".join(parts))
    return texts


def line_file(path: Path, n: int) -> Path:
    """Write ``n`` lines cycling through the STS-B dev sentences to ``path`` (one text per line)."""
    sents = stsb_sentences()
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(sents[i % len(sents)] + "\n")
    return path
