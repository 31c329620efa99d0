"""Rebuild ``squad-titled-retrieval/``: a BEIR folder whose documents have titles.

    python tests/data/make_squad_fixture.py DEV_V1_1 DEV_V2_0

``DEV_V1_1`` and ``DEV_V2_0``: SQuAD's ``dev-v1.1.json`` and ``dev-v2.0.json`` (Rajpurkar et
al., 2016 and 2018; CC BY-SA 4.0), as the SQuAD site publishes them. Documents are the
paragraphs of six Wikipedia articles (``title``: the article's name, underscores as spaces;
``text``: the paragraph, unmodified); each query is a SQuAD question with an answer, judged
relevant (1) to the paragraph it was asked on. Deterministic: file order, fixed picks (see
README.md here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "squad-titled-retrieval"
# (file argument, article): the first article of v1.1 dev, the first five of v2.0 dev.
ARTICLES = (
    (0, "Super_Bowl_50"),
    (1, "Normans"),
    (1, "Computational_complexity_theory"),
    (1, "Southern_California"),
    (1, "Sky_(United_Kingdom)"),
    (1, "Victoria_(Australia)"),
)
PER_ARTICLE = 8  # queries per article


def _answerable(paragraph: dict) -> list[dict]:
    return [q for q in paragraph["qas"] if not q.get("is_impossible") and q["answers"]]


def build(files: list[Path]) -> None:
    sources = [json.loads(f.read_text(encoding="utf-8"))["data"] for f in files]
    docs, queries, qrels = [], [], []
    for a, (which, name) in enumerate(ARTICLES):
        article = next(x for x in sources[which] if x["title"] == name)
        paragraphs = article["paragraphs"]
        title = name.replace("_", " ")
        ids = [f"p{a}-{p:02d}" for p in range(len(paragraphs))]
        docs += [{"_id": i, "title": title, "text": p["context"]}
                 for i, p in zip(ids, paragraphs, strict=True)]  # fmt: skip
        # PER_ARTICLE paragraphs spread evenly over the article; each one's first question
        # with an answer (the next paragraph's when it has none).
        for k in range(PER_ARTICLE):
            p = k * len(paragraphs) // PER_ARTICLE
            while not _answerable(paragraphs[p]):
                p += 1
            q = _answerable(paragraphs[p])[0]
            queries.append({"_id": q["id"], "text": q["question"].strip()})
            qrels.append((q["id"], ids[p]))
    (OUT / "qrels").mkdir(parents=True, exist_ok=True)
    with (OUT / "corpus.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
    with (OUT / "queries.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in queries)
    with (OUT / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t1\n" for q, d in qrels)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build([Path(sys.argv[1]), Path(sys.argv[2])])
