"""Fitted rows (#53): PCA, whitening and all-but-the-top beside truncation, on real data.

1. STS-B (``../shared/data/stsb``): ``compare --task sts`` on the dev split (1,500 pairs,
   held out), the fits made on the train split's sentences (``--train``; its scores are
   never read): ``mean``, truncation ``/64 /128 /256`` against ``/pca64 /pca128 /pca256``,
   whitening ``/whiten /whiten128 /whiten256``, ``/abtt1 /abtt3``.
2. A retrieval set shaped like SciFact, built from STS-B as ``bench_cache.py`` builds it
   (no SciFact on disk): the fits made on the documents only; the same truncation/PCA pairs
   and int8 at 128 dimensions.
3. The same with twice the queries, half of them a train split (``--train train``):
   ``/proj128`` and ``/proj384`` trained on its judgements, beside ``/128`` and ``/pca128``.

Each `compare` is a process of its own, all-MiniLM-L6-v2 on the CPU, its token-state cache
in a temporary folder. Prints one JSON object: the CPU, load, and every row's main metric
with its 95% interval and paired difference against ``mean``.

    python bench/bench_fitted.py [--documents 2000] [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _data import data_dir  # noqa: E402
from bench_cache import build, compare, cpu  # noqa: E402

STS = ["mean", "mean/64", "mean/pca64", "mean/128", "mean/pca128", "mean/proj128", "mean/256",
       "mean/pca256", "mean/proj256",
       "mean/whiten", "mean/whiten128", "mean/whiten256", "mean/abtt1", "mean/abtt3"]  # fmt: skip
TRAINED = ["mean", "mean/128", "mean/pca128", "mean/proj128", "mean/proj384"]
RETRIEVAL = ["mean", "mean/64", "mean/pca64", "mean/128", "mean/pca128", "mean/whiten128",
             "mean/abtt3", "mean/128/int8", "mean/pca128/int8"]  # fmt: skip


def rows(doc: dict, metric: str) -> list[dict]:
    return [{"recipe": r["recipe"], metric: round(r[metric], 4),
             "ci": [round(x, 4) for x in (r.get("ci") or {}).get(metric, [])],
             "vs_mean": None if r.get("difference") is None else round(r["difference"]["value"], 4),
             "significant": r.get("significant"), "bytes": r.get("bytes_per_vector"),
             "fit": (r.get("fit") or {}).get("on"),
             "fit_seconds": round((r.get("fit") or {}).get("seconds") or 0, 3)}
            for r in doc["results"]]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--documents", type=int, default=2000)
    p.add_argument("--queries", type=int, default=300)
    args = p.parse_args()
    out: dict = {"cpu": cpu(), "load_at_start": os.getloadavg()[0]}
    stsb = data_dir() / "stsb"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["POOLKIT_CACHE"] = str(work / "cache")
        seconds, doc = compare(stsb / "sts-dev.csv", work / "sts.json", "--train",
                               str(stsb / "sts-train.csv"), "--recipes", *STS,
                               "--fits-dir", str(work / "fits"), task="sts")  # fmt: skip
        out["sts"] = {"seconds": round(seconds, 1), "rows": rows(doc, "spearman")}
        n_docs, n_queries = build(work / "beir", args.documents, args.queries)
        seconds, doc = compare(work / "beir", work / "r.json", "--recipes", *RETRIEVAL,
                               "--fits-dir", str(work / "fits"))  # fmt: skip
        out["retrieval"] = {"documents": n_docs, "queries": n_queries,
                            "seconds": round(seconds, 1), "rows": rows(doc, "ndcg_at_10")}  # fmt: skip
        # Trained rows: twice the queries, judged ones split in two, the first half's
        # judgements the train split the /projK rows train on, the rest scored.
        n_docs, n_queries = build(work / "beir2", args.documents, 2 * args.queries)
        qrels = work / "beir2" / "qrels"
        head, *body = (qrels / "test.tsv").read_text().splitlines()
        ids = sorted({line.split("\t")[0] for line in body}, key=lambda q: int(q[1:]))
        train = set(ids[: len(ids) // 2])
        for name, keep in (("train", True), ("test", False)):
            lines = [x for x in body if (x.split("\t")[0] in train) == keep]
            (qrels / f"{name}.tsv").write_text("\n".join([head, *lines]) + "\n")
        seconds, doc = compare(work / "beir2", work / "r2.json", "--train", "train",
                               "--recipes", *TRAINED, "--fits-dir", str(work / "fits"))  # fmt: skip
        out["retrieval_trained"] = {"documents": n_docs, "train_queries": len(train),
                                    "scored_queries": n_queries - len(train),
                                    "seconds": round(seconds, 1),
                                    "rows": rows(doc, "ndcg_at_10")}  # fmt: skip
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
