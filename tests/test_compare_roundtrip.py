"""What ``poolkit compare`` scored is what ``poolkit embed`` writes: on a BEIR folder with
titles, the exact ``embed`` commands compare prints for a row, run on the corpus and the
queries, then ranked as compare ranks (dot products of the stored values, Hamming distance
for bits) and scored by pytrec_eval, give compare's nDCG@10 for that row."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from clitools import poolkit

pytrec_eval = pytest.importorskip("pytrec_eval")
pq = pytest.importorskip("pyarrow.parquet")

FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"
ROWS = ("mean", "mean/256/int8", "mean/binary", "mean/pca128/int8")


def titled_beir(folder: Path) -> Path:
    """The committed BEIR fixture with titles: document k's title is the first four words
    of document k + 7 (every fourth document has no title field), so that the title join
    changes what is embedded."""
    docs = [json.loads(x) for x in (FIXTURE / "corpus.jsonl").read_text().splitlines()]
    out = []
    for k, doc in enumerate(docs):
        row = {"_id": doc["_id"], "text": doc["text"]}
        if k % 4 != 3:
            row["title"] = " ".join(docs[(k + 7) % len(docs)]["text"].split()[:4])
        out.append(json.dumps(row))
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("\n".join(out) + "\n")
    (folder / "queries.jsonl").write_text((FIXTURE / "queries.jsonl").read_text())
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text((FIXTURE / "qrels" / "test.tsv").read_text())
    return folder


def read_vectors(path: Path, column: str) -> tuple[list[str], np.ndarray]:
    table = pq.read_table(path)
    return table.column("id").to_pylist(), np.asarray(table.column(column).to_pylist())


def run_scores(recipe: str, q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Query-document scores as compare ranks them: the dot product of unit float vectors,
    of the int8 integers, or minus the Hamming distance of the packed bits."""
    if recipe.endswith("/binary"):
        qb = np.unpackbits(q.astype(np.int16).__add__(128).astype(np.uint8), axis=1)
        db = np.unpackbits(d.astype(np.int16).__add__(128).astype(np.uint8), axis=1)
        return -(qb[:, None, :] != db[None, :, :]).sum(axis=2).astype(np.float64)
    if recipe.endswith("/int8"):
        return q.astype(np.float64) @ d.astype(np.float64).T
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    dn = d / np.linalg.norm(d, axis=1, keepdims=True)
    return qn.astype(np.float64) @ dn.astype(np.float64).T


@pytest.mark.slow  # the real model: one compare and eight embed commands (~60 s on 2 cores)
def test_printed_embed_commands_reproduce_compare_ndcg(tmp_path, minilm_dir):
    beir = titled_beir(tmp_path / "beir")
    model = str(minilm_dir)
    out = poolkit("compare", "beir", "--task", "retrieval", "--recipes", *ROWS,
                  "--bootstrap", "0", "--json", "scores.json", "--model", model, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((tmp_path / "scores.json").read_text())
    assert "title" in doc["documents_read_as"]
    rows = {r["recipe"]: r for r in doc["results"] if not r.get("rescore")}
    qrels: dict[str, dict[str, int]] = {}
    for line in (beir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, rel = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(rel)
    for recipe in ROWS:
        command = rows[recipe]["embed_command"]
        assert "INPUT" not in command and "FILE" not in command, command
        outputs = []
        for one in command.split(" && "):
            argv = shlex.split(one)
            assert argv[:2] == ["poolkit", "embed"], one
            ran = poolkit(*argv[1:], cwd=tmp_path)
            assert ran.returncode == 0, (one, ran.stderr.decode())
            outputs.append(tmp_path / argv[argv.index("-o") + 1])
        if recipe.endswith("int8"):
            assert "--ranges scores.json" in command
        if "/pca" in recipe:  # the fit compare made on the documents, applied to both sides
            assert command.count(f"--fit {rows[recipe]['fit']['file']}") == 2
        doc_ids, d = read_vectors(outputs[0], recipe)
        query_ids, q = read_vectors(outputs[1], recipe)
        assert set(qrels) <= set(query_ids)
        assert doc_ids == [json.loads(x)["_id"] for x in (beir / "corpus.jsonl").open()]
        scores = run_scores(recipe, q, d)
        run = {
            qid: {did: float(s) for did, s in zip(doc_ids, scores[i], strict=True)}
            for i, qid in enumerate(query_ids)
            if qid in qrels
        }
        measured = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        ndcg = np.mean([m["ndcg_cut_10"] for m in measured.values()])
        assert ndcg == pytest.approx(rows[recipe]["ndcg_at_10"], abs=1e-6), recipe
