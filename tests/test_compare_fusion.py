"""Hybrid rows of ``compare --task retrieval``: the fusion functions against a plain
per-query reference written here (dicts, as sentence-transformers'
ReciprocalRankFusionEvaluator fuses), the ``rrf(A,B)``/``fuse(A,B,W)`` names, and a run
on a tiny model whose hybrid row equals sentence-transformers vectors and bm25s fused by
hand and scored by pytrec_eval; the cost of every row; unknown rows refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from beir_ref import read_qrels
from clitools import poolkit
from tiny_models import build_family

from poolkit.compare.fusion import rrf, score_fusion
from poolkit.compare.hybrid import Hybrid, HybridError, parse_hybrid, resolve, split_hybrids

pytrec_eval = pytest.importorskip("pytrec_eval")
pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")
SQUAD = Path(__file__).parent / "data" / "squad-titled-retrieval"


def _rankings(rng: np.random.Generator, n_q: int, n_docs: int, k: int) -> np.ndarray:
    return np.stack([rng.permutation(n_docs)[:k] for _ in range(n_q)])


def _best(scores: dict[int, float], id_order: np.ndarray, width: int) -> list[int]:
    """The ``width`` best documents of one query, ties to the larger ``id_order``."""
    return sorted(scores, key=lambda d: (-scores[d], -id_order[d]))[:width]


def _rrf_reference(a, b, id_order, k, width):
    out = []
    for row_a, row_b in zip(a, b, strict=True):
        scores: dict[int, float] = {}
        for row in (row_a, row_b):
            for rank, doc in enumerate(row.tolist(), start=1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
        out.append(_best(scores, id_order, width))
    return np.asarray(out)


def _norm(values: list[float], norm: str) -> list[float]:
    v = np.asarray(values, dtype=np.float64)
    if norm == "minmax":
        span = v.max() - v.min()
        return list((v - v.min()) / span) if span > 0 else [1.0] * len(v)
    std = v.std()
    return list((v - v.mean()) / std) if std > 0 else [0.0] * len(v)


def _fuse_reference(a, sa, b, sb, id_order, weight, norm, width):
    out = []
    for ra, xa, rb, xb in zip(a, sa, b, sb, strict=True):
        na = dict(zip(ra.tolist(), _norm(list(xa), norm), strict=True))
        nb = dict(zip(rb.tolist(), _norm(list(xb), norm), strict=True))
        low_a, low_b = min(na.values()), min(nb.values())
        scores = {d: weight * na.get(d, low_a) + (1 - weight) * nb.get(d, low_b)
                  for d in [*na, *nb]}  # fmt: skip
        out.append(_best(scores, id_order, width))
    return np.asarray(out)


@pytest.mark.parametrize("k, depth", [(60, None), (0, None), (5, 7)])
def test_rrf_equals_a_per_query_reference(k, depth):
    rng = np.random.default_rng(1)
    n_docs = 40
    a, b = _rankings(rng, 9, n_docs, 12), _rankings(rng, 9, n_docs, 20)
    id_order = rng.permutation(n_docs)
    got = rrf(a, b, n_docs, id_order, k, depth)
    cut_a, cut_b = a[:, :depth], b[:, :depth]
    want = _rrf_reference(cut_a, cut_b, id_order, k, max(cut_a.shape[1], cut_b.shape[1]))
    np.testing.assert_array_equal(got, want)
    # Equal fused scores are common (rank r in one list only, on either side): the
    # reference's tie rule decides them, so a changed rule fails here.
    assert got.dtype == np.int64


@pytest.mark.parametrize("norm", ["minmax", "z"])
@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_score_fusion_equals_a_per_query_reference(norm, weight):
    rng = np.random.default_rng(2)
    n_docs = 30
    a, b = _rankings(rng, 7, n_docs, 10), _rankings(rng, 7, n_docs, 15)
    sa = -np.sort(-rng.integers(0, 4, a.shape).astype(np.float32), axis=1)  # ties, constant rows
    sa[0] = 2.0
    sb = -np.sort(-rng.normal(size=b.shape).astype(np.float32), axis=1)
    id_order = rng.permutation(n_docs)
    got = score_fusion(a, sa, b, sb, n_docs, id_order, weight, norm)
    want = _fuse_reference(a, sa, b, sb, id_order, weight, norm, 15)
    np.testing.assert_array_equal(got, want)


def test_fusion_refuses_bad_arguments():
    a = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="rankings of the same 2 queries"):
        rrf(a, np.zeros((3, 3), dtype=np.int64), 5, np.arange(5))
    with pytest.raises(ValueError, match="`weight` to be between 0 and 1"):
        score_fusion(a, a, a, a, 5, np.arange(5), weight=1.5)
    with pytest.raises(ValueError, match="`norm`"):
        score_fusion(a, a, a, a, 5, np.arange(5), norm="max")


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("rrf(mean,bm25)", "rrf(mean,bm25)"),
        (" RRF( mean , bm25 ) ", "rrf(mean,bm25)"),
        ("rrf(mean,bm25,k=60,depth=1000)", "rrf(mean,bm25)"),
        ("rrf(mean,bm25,k=10)", "rrf(mean,bm25,k=10)"),
        ("rrf(mean,bm25,depth=200)", "rrf(mean,bm25,depth=200)"),
        ("fuse(mean,bm25)", "fuse(mean,bm25,0.5)"),
        ("fuse(mean,splade,0.25,norm=z)", "fuse(mean,splade,0.25,norm=z)"),
        ("rrf(mean@-1,-2,bm25)", "rrf(mean@-1,-2,bm25)"),
    ],
)
def test_names_parse_and_print_back(name, canonical):
    h = parse_hybrid(name)
    assert isinstance(h, Hybrid) and str(h) == canonical
    assert parse_hybrid(canonical) == h


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("rrf(mean)", "to be rrf(A,B) of two row names"),
        ("rrf(mean,)", "to be rrf(A,B)"),
        ("fuse(mean,bm25,1.5)", "a weight in 0..1"),
        ("rrf(mean,bm25,k=x)", "whole numbers k and depth"),
        ("rrf(mean,bm25,norm=z)", "without norm= (a fuse() option"),
        ("fuse(mean,bm25,0.5,k=3)", "without k= (an rrf() option"),
        ("rrf(mean,bm25,depth=0)", "depth >= 1"),
    ],
)
def test_malformed_names_are_refused_in_one_line(name, fragment):
    with pytest.raises(HybridError) as e:
        parse_hybrid(name)
    message = str(e.value)
    assert message.startswith("Expected --recipes to be ") and fragment in message
    assert f"but got {name}." in message
    assert "\n" not in message


def test_split_and_resolve():
    rest, hybrids = split_hybrids(["mean", "rrf(mean@-1,-2,bm25)", "bm25", "rrf(mean,bm25)"])
    assert rest == ["mean", "bm25"] and [str(h) for h in hybrids] == [
        "rrf(mean@-1,-2,bm25)", "rrf(mean,bm25)",
    ]  # fmt: skip
    keys = {"mean": ("m", None), "mean@-1,-2": ("m2", None), "bm25": ("b", None)}
    resolved = resolve(hybrids, keys)
    assert resolved[0].parts == ("mean@-1,-2", "bm25")
    assert resolved[0].sides == (("m2", None), ("b", None))
    with pytest.raises(
        HybridError, match=r"a hybrid of rows of this run \(rows: mean, .*No row is named 'cls'"
    ):
        resolve([parse_hybrid("rrf(cls,bm25)")], keys)
    with pytest.raises(HybridError, match="with itself"):
        resolve([parse_hybrid("rrf(bm25,bm25)")], keys)


# ---------------------------------------------------------------------------- a real run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers folder (DistilBERT, CLS pooling, Normalize) of random
    weights: its own pooling is the dense row, ``cls``."""
    return build_family("distilbert", tmp_path_factory.mktemp("fusion") / "distilbert")


def _ndcg(qrels, qids, dids, ranked: np.ndarray) -> float:
    """pytrec_eval's mean nDCG@10 of rankings (scores: descending by position)."""
    run = {qids[q]: {dids[d]: float(len(row) - i) for i, d in enumerate(row)}
           for q, row in enumerate(ranked)}  # fmt: skip
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([v["ndcg_cut_10"] for v in per.values()]))


def _top(scores: np.ndarray, order: np.ndarray, k: int) -> np.ndarray:
    """Each row's ``k`` best columns, ties to the larger ``order`` (trec_eval's)."""
    return np.stack([np.lexsort((-order, -row))[:k] for row in scores])


def _bm25(texts: list[str], queries: list[str], k1: float, b: float) -> tuple[np.ndarray, int]:
    """bm25s' scores ``(Q, N)`` float64, and the entries its index stores."""
    import bm25s

    index = bm25s.BM25(k1=k1, b=b)
    index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
    scores = np.stack([index.get_scores(list(t)) for t in tokens]).astype(np.float64)
    return scores, int(index.scores["data"].size)


def test_hybrid_rows_equal_an_independent_recomputation(tiny, tmp_path):
    """Hybrids of two BM25 rows (bm25s run here, exact: no float noise between two
    implementations of a random model's near-equal cosines), fused here, pytrec_eval; the
    dense row's bytes by the formula and every hybrid's cost the sum of its rows'."""
    other = "bm25/k1=0.9/b=0.4"
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "cls", "bm25",
                  other, f"rrf(bm25,{other})", f"fuse({other},bm25,0.3)",
                  f"fuse(bm25,{other},0.6,norm=z)", f"rrf(bm25,{other},k=5,depth=20)",
                  "rrf(cls,bm25)", "--model", str(tiny), "--bootstrap", "50", "--json",
                  "out.json", "--report", "out.html", "--explain", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((tmp_path / "out.json").read_text())
    rows = {r["recipe"]: r for r in doc["results"]}
    corpus = [json.loads(x) for x in (SQUAD / "corpus.jsonl").read_text().splitlines()]
    queries = {
        q["_id"]: q["text"]
        for q in map(json.loads, (SQUAD / "queries.jsonl").read_text().splitlines())
    }
    qrels = read_qrels(SQUAD)
    qids = [q for q in queries if q in qrels]
    dids = [d["_id"] for d in corpus]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
    order = np.argsort(np.argsort(np.asarray(dids, dtype=object), kind="stable"))
    n = len(dids)
    a, entries = _bm25(texts, [queries[x] for x in qids], 1.5, 0.75)
    b, _ = _bm25(texts, [queries[x] for x in qids], 0.9, 0.4)
    top_a, top_b = _top(a, order, 1000), _top(b, order, 1000)
    s_a, s_b = np.take_along_axis(a, top_a, axis=1), np.take_along_axis(b, top_b, axis=1)
    assert rows["bm25"]["ndcg_at_10"] == pytest.approx(_ndcg(qrels, qids, dids, top_a), abs=1e-4)
    want = {
        f"rrf(bm25,{other})": _rrf_reference(top_a, top_b, order, 60, n),
        f"rrf(bm25,{other},k=5,depth=20)": _rrf_reference(top_a[:, :20], top_b[:, :20], order,
                                                          5, 20),
        f"fuse({other},bm25,0.3)": _fuse_reference(top_b, s_b, top_a, s_a, order, 0.3,
                                                   "minmax", n),
        f"fuse(bm25,{other},0.6,norm=z)": _fuse_reference(top_a, s_a, top_b, s_b, order, 0.6,
                                                          "z", n),
    }  # fmt: skip
    for name, ranked in want.items():
        assert rows[name]["ndcg_at_10"] == pytest.approx(
            _ndcg(qrels, qids, dids, ranked), abs=1e-4
        ), name
    # Cost: dense bytes by the formula, BM25's by bm25s' stored entries, hybrids the sums.
    assert rows["cls"]["bytes_per_document"] == 32 * 4
    assert rows["bm25"]["bytes_per_document"] == pytest.approx(entries * 8 / n)
    for name, sides in (
        (f"rrf(bm25,{other})", ["bm25", other]),
        ("rrf(cls,bm25)", ["cls", "bm25"]),
    ):
        row = rows[name]
        assert row["sides"] == sides and row["fusion"]["k"] == 60
        for field in ("bytes_per_document", "encode_ms"):
            assert row[field] == pytest.approx(sum(rows[s][field] for s in sides))
        # The sides' searches to the depth fused (1000 here: the corpus is smaller, so
        # the same search, timed again).
        assert row["search_ms"] == pytest.approx(sum(rows[s]["fused_search_ms"] for s in sides))
        assert row["query_ms"] == pytest.approx(row["encode_ms"] + row["search_ms"])
        assert row["index_bytes"]["1000000"] == pytest.approx(1e6 * row["bytes_per_document"])
    command = rows["rrf(cls,bm25)"]["embed_command"]
    assert "cls: poolkit embed" in command and "bm25: bm25s.BM25(k1=1.5, b=0.75)" in command
    for row in doc["results"]:
        assert row["query_ms"] > 0 and row["search_ms"] > 0 and row["search_growth"]
    assert doc["costs_measured_on"]["model"] == str(tiny)
    text = out.stdout.decode()
    assert "bytes/doc" in text and "rrf(A,B): reciprocal rank fusion" in text
    assert "search grows with the corpus" in text
    page = (tmp_path / "out.html").read_text()
    for head in ("bytes/doc", "index 1M|100M", "query ms"):  # query ms: encoding + search
        assert f'<th scope="col">{head}</th>' in page
    assert "cls: poolkit embed" in page and "cost columns measured on" in page


def test_default_run_adds_the_dense_and_bm25_hybrid(tiny):
    from poolkit.compare.retrieval import read_retrieval
    from poolkit.compare.runner import Settings, compare
    from poolkit.encoder import Encoder

    encoder = Encoder(tiny, max_length=32)
    results = compare(encoder, read_retrieval(SQUAD), Settings("retrieval", bootstrap=0))
    names = [r.name for r in results]
    assert f"rrf({encoder.info.pooling},bm25)" in names and "bm25" in names


def test_unknown_row_is_one_line_naming_the_known_rows(tiny, tmp_path):
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "cls", "bm25",
                  "rrf(mean,bm25)", "--model", str(tiny), "--json", "out.json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.decode().strip().splitlines()
    assert lines == [
        "poolkit: error: Expected --recipes to be a hybrid of rows of this run (rows: cls, bm25), "
        "but got rrf(mean,bm25). No row is named 'mean': add it to --recipes."
    ]
    assert not (tmp_path / "out.json").exists()
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "cls", "bm25",
                  "rrf(cls)", "--model", str(tiny), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2 and out.stderr.decode().count("\n") == 1
    assert "rrf(A,B) of two row names" in out.stderr.decode()
    # fuse() of a row that keeps no scores: refused before any text is embedded.
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "cls", "cls/16/int8",
                  "bm25", "fuse(cls/16/int8,bm25)", "--model", str(tiny), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.decode() == (
        "poolkit: error: Expected --recipes to be a fuse() of rows that keep scores to normalise, "
        "but got fuse(cls/16/int8,bm25,0.5). cls/16/int8 keeps none (a /DIMS, /PRECISION, "
        "+rescore or chunked row): fuse it by rrf.\n"
    )
    # Another task: refused before the model loads (there is none at this path).
    sts = Path(__file__).parent / "data" / "stsb-dev-sample.csv"
    out = poolkit("compare", str(sts), "--task", "sts", "--recipes", "mean", "rrf(mean,cls)",
                  "--model", str(tmp_path / "no-model"), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.decode() == (
        "poolkit: error: Expected --recipes to be no hybrid row with --task sts (hybrid rows fuse "
        "two rows' rankings), but got rrf(mean,cls). Use them with --task retrieval.\n"
    )


def test_export_from_compare_skips_hybrid_rows(tiny, tmp_path):
    """A hybrid row is two rows, which no model folder holds: ``export --from-compare``
    takes the first row below it that a folder can hold (here: past BM25 too)."""
    from poolkit.deploy.card import read_compare
    from poolkit.model_folder import resolve_model

    rows = [
        {"recipe": "rrf(cls,bm25)", "sides": ["cls", "bm25"], "ndcg_at_10": 0.5},
        {"recipe": "bm25", "strategy": "bm25", "ndcg_at_10": 0.4},
        {"recipe": "cls", "strategy": "cls", "ndcg_at_10": 0.3, "intended": True},
    ]
    path = tmp_path / "scores.json"
    path.write_text(json.dumps({"task": "retrieval", "model": str(tiny), "metric": "ndcg_at_10",
                                "results": rows}))  # fmt: skip
    recipe, choice = read_compare(path, resolve_model(str(tiny)))
    assert str(recipe) == "cls" and choice["rank"] == 3
