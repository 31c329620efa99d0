"""What a ``compare`` multi-vector row scored is what its printed ``embed`` commands write:
on the committed BEIR fixture with a tiny ``MultiVectorEncoder`` folder, each row's
commands run as printed; the files they write, scored by numpy (MaxSim in float64, MUVERA
by dot product, ``+rescore``: MUVERA's top 100 reranked by MaxSim) and pytrec_eval, give
the row's nDCG@10 and MAP@100 (up to the order of near-tied documents: tests/tie_bounds.py),
and its bytes per document."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from beir_ref import read_qrels, run_printed_embeds
from clitools import poolkit
from tie_bounds import maxsim_eps, metric_range
from tiny_models import build_multivector

pytrec_eval = pytest.importorskip("pytrec_eval")
pq = pytest.importorskip("pyarrow.parquet")

FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"
MUVERA = "multivector:tokens/muvera:k_sim=3,dim_proj=8,r_reps=4"
ROWS = ("multivector:tokens/pool2", "multivector:tokens/float16", MUVERA)
DEPTH = 100  # compare's search depth (the +rescore row reranks MUVERA's top 100)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    cwd = tmp_path_factory.mktemp("compare_mv_commands")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_multivector("bert_dense", cwd / "model")
    out = poolkit("compare", str(FIXTURE), "--task", "retrieval", "--model", "model",
                  "--recipes", *ROWS, "--bootstrap", "0", "--json", "scores.json", "--quiet",
                  cwd=cwd)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((cwd / "scores.json").read_text())
    return cwd, {(r["recipe"], bool(r.get("rescore"))): r for r in doc["results"]}


def _read(path: Path, column: str) -> tuple[list[str], list[np.ndarray], int]:
    """ids, one float64 array per row, and the stored bytes per value."""
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    stored = 2 if "halffloat" in str(table.schema.field(column).type) else 4
    return table.column("id").to_pylist(), [np.asarray(v, np.float64) for v in values], stored


def _maxsim(q: list[np.ndarray], d: list[np.ndarray]) -> np.ndarray:
    return np.array([[(a @ b.T).max(axis=1).sum() for b in d] for a in q])


def _measure(qrels, query_ids, doc_ids, scores, eps, first=None):
    """nDCG@10 and MAP@100 of ``scores`` (queries, documents) over ``first``'s top
    documents, each as ``(worst, best)`` over the orders of near-tied documents
    (tests/tie_bounds.py)."""
    return metric_range(qrels, query_ids, doc_ids, scores, eps,
                        {"ndcg": "ndcg_cut_10", "map": "map_cut_100"}, first)  # fmt: skip


@pytest.mark.parametrize(
    ("recipe", "rescore"), [(r, False) for r in ROWS] + [(MUVERA, True)]
)  # fmt: skip
def test_printed_commands_write_what_the_row_scored(compared, tmp_path, recipe, rescore):
    cwd, rows = compared
    row = rows[(recipe, rescore)]
    command = row["embed_command"]
    assert "--long-text" not in command and "INPUT" not in command, command
    (tmp_path / "model").symlink_to(cwd / "model")
    files = run_printed_embeds(command, tmp_path)
    assert [p.name.split("-")[0] for _, p in files] == ["corpus", "queries"] * (1 + rescore)
    assert "--prompt-name document" in command and "--prompt-name query" in command
    (name, docs_file), (_, queries_file) = files[:2]
    doc_ids, d, stored = _read(docs_file, name)
    query_ids, q, _ = _read(queries_file, name)
    assert doc_ids == [json.loads(x)["_id"] for x in (FIXTURE / "corpus.jsonl").open()]
    qrels = read_qrels(FIXTURE)
    if "muvera" not in recipe:
        scores, first, eps = _maxsim(q, d), None, maxsim_eps(q, d)
        per_doc = round(np.mean([len(x) for x in d]) * d[0].shape[1] * stored)
    else:
        scores, first = np.stack(q) @ np.stack(d).T, None
        eps = maxsim_eps([x[None] for x in q], [x[None] for x in d])  # one vector a text
        per_doc = d[0].shape[0] * stored
    if rescore:
        (tokens, t_docs), (_, t_queries) = files[2:]
        assert tokens == recipe.replace("/muvera:k_sim=3,dim_proj=8,r_reps=4", "")
        _, td, _ = _read(t_docs, tokens)
        _, tq, _ = _read(t_queries, tokens)
        # MUVERA's top 100, then MaxSim over those only. The tiny model's MUVERA scores
        # tie (exactly, or within float32 error) across the cut at 100 for some queries,
        # so which of those documents compare kept is itself a near-tie (CI's failure
        # of 2026-12-07).
        first = (scores, eps, DEPTH)
        scores, eps = _maxsim(tq, td), maxsim_eps(tq, td)
        per_doc += round(np.mean([len(x) for x in td]) * td[0].shape[1] * stored)
    # Tie-aware: the row's figure lies between the reference's worst and best orders of
    # near-tied documents (one value where there are none). The tiny random model gives
    # documents whose float64 MaxSim scores are equal or within ~1e-5 of a relevant one's,
    # and float32 noise (BLAS blocks, threads under load) flipped them in parallel runs.
    got = _measure(qrels, query_ids, doc_ids, scores, eps, first)
    for name, key in (("ndcg", "ndcg_at_10"), ("map", "map_at_100")):
        worst, best = got[name]
        assert worst - 1e-6 <= row[key] <= best + 1e-6, (key, row[key], worst, best)
    assert row["bytes_per_vector"] == per_doc


def test_a_query_prompt_name_embed_cannot_give_is_refused(compared, tmp_path):
    cwd, _ = compared
    result = poolkit("compare", str(FIXTURE), "--task", "retrieval", "--model", "model",
                     "--recipes", "multivector:tokens", "--prompt-name", "document",
                     "--json", "x.json", cwd=cwd)  # fmt: skip
    err = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(
        "poolkit: error: Expected --prompt-name to be query with the multi-vector recipe"
    ), err
    assert "but got 'document'" in err
    assert not (cwd / "x.json").exists()


def test_one_forward_pass_serves_dense_and_multivector_rows(compared, tmp_path, monkeypatch):
    # A plain encoder (no projection, no expansion): its token vectors are the dense rows'
    # last hidden states, so the MaxSim and MUVERA rows add no forward pass.
    from tiny_models import build_family

    from poolkit.backends.pytorch import TorchBackend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_family("distilbert", tmp_path / "plain")
    rows_run: list[int] = []
    real = TorchBackend.forward

    def counted(self, inputs, **kwargs):
        rows_run.append(len(inputs["input_ids"]))
        return real(self, inputs, **kwargs)

    monkeypatch.setattr(TorchBackend, "forward", counted)

    def compare(*recipes: str) -> tuple[int, dict]:
        rows_run.clear()
        out = poolkit("compare", str(FIXTURE), "--task", "retrieval", "--model", "plain",
                      "--recipes", *recipes, "--bootstrap", "0", "--json", "s.json",
                      "--quiet", "--no-cache", cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stderr.decode()
        doc = json.loads((tmp_path / "s.json").read_text())
        (tmp_path / "s.json").unlink()
        return sum(rows_run), {(r["recipe"], bool(r.get("rescore"))): r for r in doc["results"]}

    multi = ("multivector:tokens", "multivector:tokens/l2/pool2", MUVERA)
    dense_only, _ = compare("mean")
    shared, rows = compare("mean", *multi)
    alone, alone_rows = compare(*multi)  # no dense row: the sides get a pass each
    # Each side once, every text as the printed `embed` commands read it (duplicates kept,
    # so they batch as this pass did: docs/equality.md), with or without a dense row.
    texts = len(_texts(FIXTURE / "queries.jsonl")) + len(_texts(FIXTURE / "corpus.jsonl"))
    assert dense_only == shared == alone == texts
    for key, row in alone_rows.items():  # the same token vectors, from either pass
        assert rows[key]["ndcg_at_10"] == pytest.approx(row["ndcg_at_10"], abs=1e-6), key
        assert rows[key]["bytes_per_vector"] == row["bytes_per_vector"], key


def _texts(path: Path) -> list[str]:
    """The texts compare embeds from a BEIR file (title + text for documents)."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out.append((rec.get("title", "") + " " + rec["text"]).strip() if "title" in rec
                   else rec["text"])  # fmt: skip
    return out
