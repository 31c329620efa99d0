"""Where the tests find their data: committed fixtures, and the full data sets.

- ``fixture(name)``: a small file committed under ``tests/data/`` (source, licence and how
  each was cut: ``tests/data/README.md``). Every test that only needs *some* real text uses
  these, so the suite passes in a fresh clone.
- ``full_data(relative)``: a file of the full public data sets, read from the folder named by
  ``POOLKIT_TEST_DATA`` (default: ``../shared/data`` beside the repository). When it is absent
  the calling test is skipped with one reason, ``needs the data sets (set POOLKIT_TEST_DATA)``.
  Only tests whose point is a full-data reference figure use it; ``.ci/run`` sets it. Such a
  test is marked ``@pytest.mark.data`` (``full_data`` fails an unmarked caller): CI runs
  ``-m "slow or data"`` with the data sets, and the fast set in a fresh clone without them.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data"
SKIP_REASON = "needs the data sets (set POOLKIT_TEST_DATA)"
# Whether the running test carries @pytest.mark.data (set by conftest before its setup).
running_marked_data = False


def data_root() -> Path:
    """The folder of the full data sets: ``$POOLKIT_TEST_DATA`` or ``../shared/data``."""
    return Path(os.environ.get("POOLKIT_TEST_DATA") or ROOT.parent / "shared" / "data")


def full_data(relative: str) -> Path:
    """``data_root() / relative``; skips the calling test when the file is not there."""
    # Checked before the skip, so an unmarked test fails in a fresh clone too: without the
    # mark, CI's data run (-m "slow or data") would never select a fast caller.
    assert running_marked_data, "a test that reads full_data() needs @pytest.mark.data"
    path = data_root() / relative
    if not path.is_file():
        pytest.skip(SKIP_REASON)
    return path


def fixture(name: str) -> Path:
    """A committed fixture under ``tests/data/``."""
    path = FIXTURES / name
    assert path.is_file(), f"missing fixture {path}; see tests/data/README.md"
    return path


def read_sts_pairs(path: Path) -> list[tuple[float, str, str]]:
    """(score, sentence1, sentence2) per line of an STS-B file (first 7 fields, no quoting)."""
    with open(path, encoding="utf-8", newline="") as f:
        return [
            (float(r[4]), r[5], r[6]) for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        ]


def sts_sentences(path: Path | None = None) -> list[str]:
    """sentence1, sentence2 of each STS-B pair, in file order (default: the committed sample)."""
    pairs = read_sts_pairs(path or fixture("stsb-dev-sample.csv"))
    return [s for _, a, b in pairs for s in (a, b)]


def sentiment_lines() -> list[tuple[str, str]]:
    """(label, sentence) of the committed SST-2-format fixture."""
    lines = fixture("sentiment.txt").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split(" ", 1)) for line in lines]  # type: ignore[misc]


def conll_sentences(path: Path, count: int | None = None) -> list[list[tuple[str, str]]]:
    """[(token, tag), ...] per sentence of a CoNLL file; a blank (or blank-looking) line ends one."""
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            token, tag = line.split("\t")
            current.append((token, tag))
        elif current:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences[:count]


def sentences(n: int) -> list[str]:
    """``n`` distinct real sentences from the fixtures, in a fixed order.

    The STS-B sample and the sentiment fixture first; past those, pairs of them joined
    (sentence ``i`` then sentence ``i + k``, for k = 1, 2, ...), so a long job still reads
    real text.
    """
    base = list(dict.fromkeys([*sts_sentences(), *(s for _, s in sentiment_lines())]))
    out = base[:n]
    k = 1
    while len(out) < n:
        out += [f"{a} {base[(i + k) % len(base)]}" for i, a in enumerate(base)][: n - len(out)]
        k += 1
    assert len(set(out)) == n
    return out


def sts_pairs_table(path: Path) -> Path:
    """The committed STS-B sample written to ``path`` as a table both ``poolkit compare`` and
    ``poolkit embed`` read: a ``sentence1<TAB>sentence2<TAB>score`` header, CSV quoting."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, delimiter="\t", lineterminator="\n")
        out.writerow(["sentence1", "sentence2", "score"])
        out.writerows((a, b, s) for s, a, b in read_sts_pairs(fixture("stsb-dev-sample.csv")))
    return path


def read_beir(
    folder: Path, split: str = "test"
) -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    """A BEIR folder read here, independently of poolkit: the document ids, their texts
    (title and text joined by a space, as MTEB does), the queries by id and the qrels of
    ``split`` (``{query id: {document id: score}}``)."""
    import json

    corpus = [json.loads(x) for x in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = {(q := json.loads(x))["_id"]: q["text"]
               for x in (folder / "queries.jsonl").read_text().splitlines()}  # fmt: skip
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    ids = [d["_id"] for d in corpus]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
    return ids, texts, queries, qrels
