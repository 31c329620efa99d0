"""Rebuild the `poolkit compare` retrieval and clustering fixtures in this folder.

    POOLKIT_TEST_DATA=../shared/data python tests/data/make_compare_fixtures.py

Deterministic (file order, fixed strides); see README.md here for what is cut and why.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("POOLKIT_TEST_DATA", HERE.parents[1].parent / "shared" / "data"))


def stsb_images(name: str) -> list[tuple[str, float, str, str]]:
    """(line, score, sentence1, sentence2) of the STS-B `images` pairs (CC BY-SA captions);
    ``line`` is the 1-based line number in the file, 4 digits (STS-B's own ids repeat)."""
    out = []
    with (DATA / "stsb" / name).open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for fields in reader:
            if fields[1] == "images":
                out.append((f"{reader.line_num:04d}", float(fields[4]), fields[5], fields[6]))
    return out


def retrieval() -> None:
    pairs = stsb_images("sts-train.csv")
    positive = [p for p in pairs if p[1] >= 4.0][::2]  # every second pair scored >= 4
    distract = [p for p in pairs if p[1] < 4.0][::2]  # every second other pair
    folder = HERE / "stsb-images-retrieval"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    docs: dict[str, str] = {}  # text -> id
    queries: dict[str, str] = {}
    qrels = []
    for pid, score, s1, s2 in positive:
        did = docs.setdefault(s2, f"d{pid}")
        qid = queries.setdefault(s1, f"q{pid}")
        qrels.append((qid, did, 2 if score >= 4.5 else 1))
    for pid, _, _, s2 in distract:
        docs.setdefault(s2, f"d{pid}")
    grade: dict[tuple[str, str], int] = {}
    for q, d, g in qrels:
        grade.setdefault((q, d), g)  # a repeated pair counts once, with its first grade
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for text, did in docs.items():
            f.write(json.dumps({"_id": did, "title": "", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for text, qid in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with (folder / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, d in grade:
            f.write(f"{q}\t{d}\t{grade[(q, d)]}\n")
    # The simple form: (query, positive document) rows from STS-B dev images pairs >= 4.
    dev = [p for p in stsb_images("sts-dev.csv") if p[1] >= 4.0]
    with (HERE / "stsb-images-pairs.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query", "document"])
        seen = set()
        for _, _, s1, s2 in dev:
            if (s1, s2) not in seen:
                seen.add((s1, s2))
                w.writerow([s1, s2])


N_DOCS = 32  # stsb-images-longdocs: 32 documents, 3 queries each


def longdocs() -> None:
    """Long documents for chunked retrieval: each is 36-84 `images` captions joined with a
    space (350-960 WordPiece tokens, beyond all-MiniLM-L6-v2's 256), three of them the
    sentence2 of a query's pair, one in each third of the document (query ``i`` goes to
    document ``i mod 32``); the other captions are fillers, in file order."""
    train = stsb_images("sts-train.csv")
    # The first 96 usable pairs scored >= 4 that stsb-images-retrieval skips (it takes every
    # second one); a pair whose text is already a query or target is skipped.
    queries, targets, qrels = {}, set(), []  # query text -> id; (qid, target, grade)
    for pid, score, s1, s2 in [p for p in train if p[1] >= 4.0][1::2]:
        if len(qrels) < N_DOCS * 3 and s1 != s2 and s1 not in queries and s1 not in targets:
            if s2 not in targets and s2 not in queries:
                queries[s1] = f"q{pid}"
                targets.add(s2)
                qrels.append((f"q{pid}", s2, 2 if score >= 4.5 else 1))
    # Fillers: every other `images` caption, train then dev, file order, each once.
    fillers, seen = [], set(queries) | targets
    for _, _, s1, s2 in train + stsb_images("sts-dev.csv"):
        for s in (s1, s2):
            if s not in seen:
                seen.add(s)
                fillers.append(s)
    folder = HERE / "stsb-images-longdocs"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    docs, grades, nxt = [], [], iter(fillers)
    for d in range(N_DOCS):
        m = 36 + (d * 17) % 49  # captions in the document: 36..84
        mine = qrels[d::N_DOCS]  # queries d, d + N_DOCS, d + 2 * N_DOCS
        slots = {(j * m + (d * 11) % m) // 3: q for j, q in enumerate(mine)}
        parts = [slots[k][1] if k in slots else next(nxt) for k in range(m)]
        did = f"d{d + 1:02d}"
        docs.append((did, " ".join(parts)))
        grades += [(qid, did, g) for qid, _, g in mine]
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for did, text in docs:
            f.write(json.dumps({"_id": did, "title": "", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for text, qid in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with (folder / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, did, g in sorted(grades):
            f.write(f"{qid}\t{did}\t{g}\n")


def clustering() -> None:
    """WNUT-17 train sentences whose entities all have one type; label = that type."""
    sentences, cur = [], []
    for line in (DATA / "wnut17" / "wnut17train.conll").read_text(encoding="utf-8").splitlines():
        if line.strip():
            token, tag = line.split("\t")
            cur.append((token, tag))
        elif cur:
            sentences.append(cur)
            cur = []
    per_type: dict[str, list[str]] = {}
    for s in sentences:
        types = {t[2:] for _, t in s if t != "O"}
        if len(types) == 1:
            per_type.setdefault(types.pop(), []).append(" ".join(w for w, _ in s))
    with (HERE / "wnut17-entity-type-clustering.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for label in ("person", "location", "corporation", "product"):
            for text in per_type[label][:60]:
                w.writerow([text, label])


if __name__ == "__main__":
    retrieval()
    longdocs()
    clustering()
