"""Several models in one ``compare`` run, the quality/cost frontier and the cost limits.

Pure: :func:`poolkit.compare.frontier.pareto`, ``best_within`` and ``untold`` against
loops written from their definitions (and ``bootstrap.paired``). CLI, in process, on
tiny random models built offline (a dense sentence-transformers folder, a SPLADE
``SparseEncoder`` and a ``MultiVectorEncoder``) and the committed BEIR fixture: rows of
all three models in one table; the frontier marks recomputed from the printed figures;
a row of each model reproduced from its printed ``embed`` commands (pytrec_eval on the
files they write); ``vs *`` across models recomputed as a paired bootstrap of those
per-query scores; the cost limit's row recomputed; bad input refused in one line.
Slow: the report in headless Chromium, its frontier read back and a screenshot checked.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from beir_ref import read_qrels, run_printed_embeds
from clitools import run_cli
from test_compare_report import chromium, pixels, run_chromium
from tie_bounds import dot_eps, maxsim_eps, query_ranges
from tie_bounds import order as tie_order
from tiny_models import build_family, build_mlm, build_multivector, build_sparse_encoder

from poolkit.compare import bootstrap as bs
from poolkit.compare import report
from poolkit.compare.frontier import QUERY_NOISE, best_within, mark, pareto, untold
from poolkit.compare.html_report import Page, render
from poolkit.compare.report import Result
from poolkit.recipe import Recipe

pytrec_eval = pytest.importorskip("pytrec_eval")
pq = pytest.importorskip("pyarrow.parquet")
pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")

FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"
RESAMPLES = 200
LIMIT = 200.0  # bytes per document: the dense rows' float32 vectors fit, no other row
ACROSS = "rrf(dense:mean,splade:splade)"  # a hybrid of two models' rows


# --- pure ----------------------------------------------------------------------------------


def _dominated(q: list[float], c: list[float | None], i: int, top: list[bool],
               noise: float = 0.0) -> bool:  # fmt: skip
    """Row ``j`` costs no more than ``i`` when within ``noise`` above it, less when more
    than ``noise`` below it."""

    def no_more(j: int) -> bool:
        return c[j] <= c[i] * (1 + noise)

    def less(j: int) -> bool:
        return c[j] < c[i] * (1 - noise)

    return c[i] is None or any(
        c[j] is not None
        and (
            (q[j] >= q[i] and no_more(j) and (q[j] > q[i] or less(j)))
            or (top[i] and top[j] and less(j))
        )
        for j in range(len(q))
    )


def reference_frontier(
    q: list[float], c: list[float | None], top: list[bool] | None = None, noise: float = 0.0
) -> list[bool]:
    """The frontier by its definition: no known-cost row at least as good and as cheap,
    better or cheaper in one, and, of the ``top`` rows (#1 and the rows the paired test
    cannot tell from it), none cheaper; a row of unknown cost is never on it."""
    top = top or [False] * len(q)
    return [not _dominated(q, c, i, top, noise) for i in range(len(q))]


def top_rows(rows: list[dict]) -> list[bool]:
    """From the JSON: #1 and the rows whose paired interval against it includes 0."""
    return [i == 0 or (r["vs_best"] is not None and r["vs_best"]["ci"][0] <= 0
                       <= r["vs_best"]["ci"][1]) for i, r in enumerate(rows)]  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_pareto_equals_the_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    q = rng.integers(0, 6, n).astype(float) / 5  # few values: ties on quality and on cost
    c = rng.integers(1, 8, n).astype(float)
    c[rng.random(n) < 0.2] = np.nan
    costs = [None if math.isnan(x) else float(x) for x in c]
    got = pareto(q, c)
    assert got.tolist() == reference_frontier(q.tolist(), costs)
    top = rng.random(n) < 0.4
    assert pareto(q, c, top).tolist() == reference_frontier(q.tolist(), costs, top.tolist())
    on = sorted({(c[i], q[i]) for i in np.flatnonzero(got)})
    assert all(a[1] < b[1] and a[0] < b[0] for a, b in itertools.pairwise(on))
    # Times within 10% count as the same cost: costs 7 apart by a few per cent.
    t = c * rng.choice([1.0, 1.04, 1.3], n)
    times = [None if math.isnan(x) else float(x) for x in t]
    for mask in (None, top):
        want = reference_frontier(q.tolist(), times, None if mask is None else mask.tolist(), 0.1)
        assert pareto(q, t, mask, noise=0.1).tolist() == want
        assert any(want) or all(x is None for x in times)  # never empty
    for limit in (0.5, 3, 7.5):
        ok = [i for i in range(n) if costs[i] is not None and costs[i] <= limit]
        want = max(ok, key=lambda i: (q[i], -i)) if ok else None
        assert best_within(q, c, limit) == want


def test_untold_is_the_paired_bootstrap_interval():
    rng = np.random.default_rng(3)
    boot = rng.normal(0.5, 0.05, (300, 6)) + np.linspace(0, 0.12, 6)
    point = boot.mean(axis=0)
    got = untold(point, boot, 2)
    for k in range(6):
        if k == 2:
            assert not got[k]
            continue
        paired = bs.paired(point[k], point[2], boot[:, k], boot[:, 2])
        assert got[k] == (not paired.significant)
    assert got.any() and not got.all()


# --- three tiny models, one table --------------------------------------------------------


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str, str]:
    """One compare run of a dense, a SPLADE and a multi-vector tiny model: the folder, the
    JSON, the table and the report's path."""
    cwd = tmp_path_factory.mktemp("three_models")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_family("bert_dense", cwd / "dense")
        build_sparse_encoder(build_mlm("bert_dense", cwd / "mlm"), cwd / "splade")
        build_multivector("bert_dense", cwd / "colbert")
    out = run_cli(["compare", str(FIXTURE), "--task", "retrieval", "--model", "dense",
                   "--model", "splade", "--model", "colbert", "--recipes", "mean", ACROSS,
                   "--precision", "float32", "--bootstrap", str(RESAMPLES),
                   "--max-bytes-per-doc", f"{LIMIT:g}", "--json", "r.json", "--report",
                   "r.html", "--quiet"], cwd=cwd)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((cwd / "r.json").read_text())
    return cwd, doc, out.stdout.decode(), "r.html"


def _bytes(row: dict) -> float | None:
    """A row's bytes per document from the JSON: its ``bytes_per_document`` cost field."""
    return row["bytes_per_document"]


def _table_columns(table: str, n: int) -> dict[str, list[str]]:
    """The printed table's first ``n`` rows by column name, each column's span read from
    the line of dashes under its head."""
    head, dashes, *lines = table.split("\n\n", 1)[1].splitlines()  # after the answer
    spans = [m.span() for m in re.finditer(r"-+", dashes)]
    return {head[a:b].strip(): [line[a:b].strip() for line in lines[:n]] for a, b in spans}


def test_rows_of_every_model_in_one_table(three):
    _, doc, table, _ = three
    rows = doc["results"]
    assert doc["models"] == ["dense", "splade", "colbert"]
    assert [r["model"] for r in rows].count(None) == 1  # the hybrid across models
    assert {r["model"] for r in rows} - {None} == {"dense", "splade", "colbert"}
    kinds = {(r["model"], r["recipe"].split(":")[0].split("/")[0]) for r in rows}
    assert {("dense", "mean"), ("splade", "splade"), ("colbert", "multivector")} <= kinds
    assert [r["intended"] for r in rows].count(True) == 1  # one *: the first model's
    (star,) = [r for r in rows if r["intended"]]
    assert (star["model"], star["recipe"]) == ("dense", "mean")
    for r in rows:  # every row paired with *, on the same resamples
        assert r["ci"] is not None
        if r is not star:
            d = r["difference"]
            assert d["value"] == pytest.approx(r["ndcg_at_10"] - star["ndcg_at_10"], abs=1e-12)
    body = table.split("\n\n", 1)[1].splitlines()[2 : 2 + len(rows)]
    for r, line in zip(rows, body, strict=True):  # the table names model and recipe
        assert _printed(r) in line.split()


def _printed(row: dict) -> str:
    """A row's name as the table prints it: ``model:recipe``; a hybrid across models
    names its two rows that way itself."""
    return row["recipe"] if row["model"] is None else f"{row['model']}:{row['recipe']}"


def test_frontier_equals_the_one_from_the_printed_figures(three):
    """Both frontiers recomputed from the rows' cost figures (the JSON's, which the table
    prints) match the JSON's marks and the table's ``frontier`` column."""
    _, doc, table, _ = three
    rows = doc["results"]
    columns = _table_columns(table, len(rows))
    for r, b, t in zip(
        rows, columns["bytes/doc"], columns["query ms"], strict=True
    ):  # the table prints them
        assert b == f"{r['bytes_per_document']:.0f}" and t == f"{r['query_ms']:.2f}", r
    q = [r["ndcg_at_10"] for r in rows]
    for r in rows:  # the query cost is the whole of it: encoding and search
        assert r["query_ms"] == pytest.approx(r["encode_ms"] + r["search_ms"])
    on_bytes = reference_frontier(q, [_bytes(r) for r in rows], top_rows(rows))
    # Measured times within QUERY_NOISE of each other count as one cost (#55).
    on_query = reference_frontier(q, [r["query_ms"] for r in rows], top_rows(rows), QUERY_NOISE)
    assert [r["frontier_bytes"] for r in rows] == on_bytes
    assert [r["frontier_query"] for r in rows] == on_query
    assert sum(on_bytes) >= 2 and any(on_query)
    marks = [set(x.split()) for x in columns["frontier"]]
    assert marks == [{n for n, on in (("bytes", b), ("query", t)) if on}
                     for b, t in zip(on_bytes, on_query, strict=True)]  # fmt: skip
    # One byte column: no per-vector bytes beside bytes/doc, the sparse row its f16 figure.
    assert "bytes" not in columns and not any("f32" in c for c in columns)
    (sparse,) = [i for i, r in enumerate(rows) if r["recipe"] == "splade"]
    f16 = columns["bytes/doc f16"][sparse]
    assert f16 == f"{rows[sparse]['bytes_per_document_f16']:.0f}"


def _frontier_labels(markup: str, chart: str) -> list[dict]:
    """The attributes of every frontier label of the page's ``chart`` (bytes, query)."""
    from test_compare_report import PageText

    svg = markup[markup.index(f'id="frontier-{chart}"') :]
    page = PageText(svg[: svg.index("</svg>")])
    return [a for tag, a in page.tags if tag == "text" and a.get("class") == "frontier-label"]


def _check_labels(markup: str, rows: list[dict]) -> None:
    """Each chart's labelled ranks are the JSON's rows on that frontier, named model:recipe."""
    for chart in ("bytes", "query"):
        labels = _frontier_labels(markup, chart)
        want = [i for i, r in enumerate(rows, 1) if r[f"frontier_{chart}"]]
        assert sorted(int(a["data-rank"]) for a in labels) == want, chart
        for a in labels:
            r = rows[int(a["data-rank"]) - 1]
            assert a["data-name"].startswith(_printed(r)), a


def test_the_report_labels_the_json_frontier(three):
    cwd, doc, table, report = three
    markup = (cwd / report).read_text(encoding="utf-8")
    _check_labels(markup, doc["results"])
    # The page's compare command scores the same table again: every model, the limit.
    assert "--model dense --model splade --model colbert --max-bytes-per-doc 200" in markup
    assert "* the first model's intended pooling" in table


def _scores(kind: str, recipe: str, docs: Path, queries: Path) -> tuple[list, list, np.ndarray,
                                                                      np.ndarray]:  # fmt: skip
    """Document ids, query ids, the (queries, documents) scores of the files, as each kind
    of row ranks (cosine, sparse dot product, MaxSim), and per query the float32 error
    bound of compare's own scores (tests/tie_bounds.py)."""
    d, qt = pq.read_table(docs), pq.read_table(queries)
    if kind == "splade":
        width = 1 + max(
            max(x, default=0) for t in (d, qt) for x in t[f"{recipe}_indices"].to_pylist()
        )

        def dense(t):
            out = np.zeros((t.num_rows, width))
            for i, (ix, v) in enumerate(zip(t[f"{recipe}_indices"].to_pylist(),
                                            t[f"{recipe}_values"].to_pylist(), strict=True)):  # fmt: skip
                out[i, ix] = v
            return out

        a, b = dense(qt), dense(d)
        s, eps = a @ b.T, dot_eps(a, b)
    elif kind == "multivector":
        dv = [np.asarray(x, np.float64) for x in d[recipe].to_pylist()]
        qv = [np.asarray(x, np.float64) for x in qt[recipe].to_pylist()]
        s = np.array([[(a @ b.T).max(axis=1).sum() for b in dv] for a in qv])
        eps = maxsim_eps(qv, dv)
    else:
        a = np.asarray(qt[recipe].to_pylist(), np.float64)
        b = np.asarray(d[recipe].to_pylist(), np.float64)
        a, b = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (a, b))
        s, eps = a @ b.T, dot_eps(a, b)
    return d["id"].to_pylist(), qt["id"].to_pylist(), s, eps


def _paired_ci(lo: np.ndarray, hi: np.ndarray, star: tuple[np.ndarray, np.ndarray]) -> tuple:
    """The bounds of the paired bootstrap's 95% interval of ``row - star`` when each query's
    values lie in ``[lo, hi]`` (near-ties either way): a resample's mean, and so each
    percentile, only grows with a query's value (the table's resamples, seed 0)."""
    idx = np.random.default_rng(0).integers(0, len(lo), size=(RESAMPLES, len(lo)))
    low = lo[idx].mean(axis=1) - star[1][idx].mean(axis=1)
    high = hi[idx].mean(axis=1) - star[0][idx].mean(axis=1)
    return np.percentile(low, [2.5, 97.5]), np.percentile(high, [2.5, 97.5])


def _within(got: list[float], bounds: tuple) -> bool:
    return all(a - 1e-9 <= g <= b + 1e-9 for g, a, b in zip(got, *bounds, strict=True))


def test_a_row_of_each_model_reproduces_and_stays_paired(three, tmp_path):
    """Each model's own row from its printed commands: the same vectors (compare batches
    each side as the commands do: docs/equality.md), scored here in float64. The tiny
    random model leaves documents whose scores lie within compare's float32 error of each
    other, so each query's nDCG@10 is a range over their orders (tests/tie_bounds.py; one
    value where there are none): the row's figure lies in it, and its ``vs *`` interval
    between the paired bootstraps of the ranges' ends."""
    cwd, doc, _, _ = three
    rows = doc["results"]
    qrels = read_qrels(FIXTURE)
    for name in ("dense", "splade", "colbert"):
        (tmp_path / name).symlink_to(cwd / name)
    wanted = {"dense": "mean", "splade": "splade", "colbert": "multivector"}  # their own
    per_query = {}
    for model, kind in wanted.items():
        (row,) = [r for r in rows if r["model"] == model and r["recipe"].split(":")[0] == kind]
        command = row["embed_command"]
        assert f"--model {model}" in command and "INPUT" not in command, command
        (recipe, docs), (_, queries) = run_printed_embeds(command, tmp_path)
        doc_ids, query_ids, s, eps = _scores(kind, recipe, docs, queries)
        lo, hi = query_ranges(qrels, query_ids, doc_ids, s, eps, {"n": "ndcg_cut_10"})["n"]
        assert lo.mean() - 1e-9 <= row["ndcg_at_10"] <= hi.mean() + 1e-9, (model, lo, hi)
        per_query[model], per_query[(model, "row")] = (lo, hi), row
    # vs * across models: the paired bootstrap of the per-query differences, redrawn here.
    for model in ("splade", "colbert"):
        got = per_query[(model, "row")]["difference"]["ci"]
        assert _within(got, _paired_ci(*per_query[model], per_query["dense"])), model


def test_a_hybrid_across_models_is_rrf_of_each_models_row(three, tmp_path):
    """``rrf(dense:mean,splade:splade)``: each side reproduced from its printed command
    (its own --model), fused here by RRF's definition (k = 60, every document: the corpus
    is under the depth), pytrec_eval; its cost the sum of its rows', its interval paired.
    Near-tied documents of a side (within compare's float32 error) are ordered relevant
    last on both sides, then relevant first: the fused nDCG@10 of each query lies between."""
    cwd, doc, _, _ = three
    rows = doc["results"]
    (row,) = [r for r in rows if r["recipe"] == ACROSS]
    assert row["model"] is None and row["sides"] == ["dense:mean", "splade:splade"]
    assert row["side_models"] == ["dense", "splade"]
    side = {f"{r['model']}:{r['recipe']}": r for r in rows if r["model"]}
    for field in ("bytes_per_document", "encode_ms", "fused_search_ms"):
        want = sum(side[s][field] for s in row["sides"])
        assert row["search_ms" if field == "fused_search_ms" else field] == pytest.approx(want)
    assert row["query_ms"] == pytest.approx(row["encode_ms"] + row["search_ms"])
    for name in ("dense", "splade"):
        (tmp_path / name).symlink_to(cwd / name)
    commands = dict(part.split(": ", 1) for part in row["embed_command"].split(" ; "))
    assert list(commands) == row["sides"]
    qrels = read_qrels(FIXTURE)
    sides = []
    for name, kind in (("dense:mean", "mean"), ("splade:splade", "splade")):
        assert f"--model {name.split(':')[0]}" in commands[name]
        (recipe, docs), (_, queries) = run_printed_embeds(commands[name], tmp_path)
        doc_ids, query_ids, s, eps = _scores(kind, recipe, docs, queries)
        sides.append((s, eps))
    kept = [i for i, qid in enumerate(query_ids) if qid in qrels]
    ids = np.asarray(doc_ids, dtype=object)
    order = np.argsort(np.argsort(ids, kind="stable"))  # fused ties: larger `order` first

    def ndcg(ranked: dict[str, list[int]]) -> np.ndarray:  # per query, in compare's order
        run = {q: {doc_ids[j]: float(len(r) - n) for n, j in enumerate(r)} for q, r in
               ranked.items()}  # fmt: skip
        got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        return np.array([got[query_ids[i]]["ndcg_cut_10"] for i in kept])

    ends = []
    for best in (False, True):
        ranked = {}
        for i in kept:
            gains = np.array([qrels[query_ids[i]].get(d, 0) for d in doc_ids], np.float64)
            fused = np.zeros(len(doc_ids))
            for s, eps in sides:  # RRF by its definition, each side's rank 1-based
                rank = np.empty(len(doc_ids))
                rank[tie_order(s[i], gains, float(eps[i]), best)] = np.arange(1, len(doc_ids) + 1)
                fused += 1.0 / (60 + rank)
            ranked[query_ids[i]] = list(np.lexsort((-order, -fused)))
        ends.append(ndcg(ranked))
    lo, hi = ends
    assert lo.mean() - 1e-9 <= row["ndcg_at_10"] <= hi.mean() + 1e-9, (lo.mean(), hi.mean())
    # vs *: paired with dense:mean (the * row) on the table's resamples.
    assert side["dense:mean"]["intended"]
    s, eps = sides[0]
    star = query_ranges(qrels, query_ids, doc_ids, s, eps, {"n": "ndcg_cut_10"})["n"]
    assert star[0].mean() - 1e-9 <= side["dense:mean"]["ndcg_at_10"] <= star[1].mean() + 1e-9
    assert _within(row["difference"]["ci"], _paired_ci(lo, hi, star))


def test_default_hybrids_across_models_fuse_each_dense_model_with_each_splade(three):
    """Without --recipes: rrf(D:*,S:own) for each dense model D and SPLADE model S (a
    multi-vector folder is neither), named as the table prints rows, each side's model."""
    from poolkit.compare.hybrid_across import default_across
    from poolkit.encoder import Encoder

    cwd = three[0]
    encoders = [(m, Encoder(str(cwd / m))) for m in ("splade", "dense", "colbert")]
    names = ["splade", "dense", "colbert"]
    dense = encoders[1][1].info.intended_recipe()
    own = encoders[0][1].info.intended_recipe()
    (h,) = default_across(encoders, names, [])
    assert (str(h), h.models) == (f"rrf(dense:{dense},splade:{own})", ("dense", "splade"))
    assert default_across(encoders, names, [h]) == []


def test_the_cost_limit_keeps_the_best_row_within_it(three):
    _, doc, table, _ = three
    rows = doc["results"]
    (limit,) = doc["limits"]
    fits = [i for i, r in enumerate(rows) if (b := _bytes(r)) is not None and b <= LIMIT]
    best = max(fits, key=lambda i: (rows[i]["ndcg_at_10"], -i))
    assert (limit["flag"], limit["limit"], limit["rank"]) == (
        "--max-bytes-per-doc",
        LIMIT,
        best + 1,
    )
    assert limit["model"] == rows[best]["model"] and limit["cost"] == _bytes(rows[best])
    assert isinstance(limit["untold"], list)
    line = next(x for x in table.splitlines() if x.startswith("--max-bytes-per-doc"))
    assert f"#{best + 1} {rows[best]['model']}:{rows[best]['recipe']}" in line


# --- bad input: one line, status 2 ---------------------------------------------------------


def _refused(cwd: Path, *argv: str) -> str:
    out = run_cli(["compare", *argv, "--quiet"], cwd=cwd)
    err = out.stderr.decode()
    assert (out.returncode, out.stdout) == (2, b""), err
    assert err.startswith("poolkit: error: ") and err.count("\n") == 1, err
    return err


def test_bad_input_is_one_line(three, tiny_dirs, tmp_path):
    cwd = three[0]
    data = str(FIXTURE)
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--recipes", "mean",
                   "--precision", "binary", "--bootstrap", "0", "--max-bytes-per-doc", "1",
                   "--json", str(tmp_path / "x.json"))  # fmt: skip
    assert (
        "Expected --max-bytes-per-doc to be a limit some row is within (the cheapest is #" in err
    ), err
    assert "but got 1." in err, err
    assert "mean/binary" in err, err  # the cheapest row: a binary one
    assert not (tmp_path / "x.json").exists()  # nothing half-written
    sts = str(Path(__file__).parent / "data" / "stsb-dev-sample.csv")
    err = _refused(cwd, sts, "--task", "sts", "--model", "dense", "--max-bytes-per-doc", "64")
    assert (
        "Expected --max-bytes-per-doc to be given only for --task retrieval" in err
        and "no documents" in err
    )
    other = str(tiny_dirs["bert_cls"])  # MiniLM's tokenizer, not the family's
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--model", other,
                   "--chunk-tokens", "16")  # fmt: skip
    assert "tokenizers differ" in err and "chunk ids" in err, err
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--model", "splade",
                   "--recipes", "mean", "rrf(dense:mean,splade:nope)", "--bootstrap", "0")  # fmt: skip
    assert "rrf(dense:mean,splade:nope): no row named splade:nope" in err, err
    assert "rows of splade: splade:mean, splade:splade" in err, err
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--model", "splade",
                   "--recipes", "mean", "rrf(dense:mean,other:mean)")  # fmt: skip
    assert "label:row, the label one of dense, splade" in err, err
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--model", "dense")
    assert "Expected --model to be each model once" in err and "but got dense twice" in err
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--model", "splade",
                   "--backend", "onnx", "--quantize", "int8")  # fmt: skip
    assert "Expected --quantize to be one --model" in err
    # No row answers in a billionth of a ms (or this run times no query): refused either way.
    err = _refused(cwd, data, "--task", "retrieval", "--model", "dense", "--recipes", "mean",
                   "--bootstrap", "0", "--max-query-ms", "1e-9")  # fmt: skip
    assert err.startswith(
        "poolkit: error: Expected --max-query-ms to be a limit some row is within"
    ), err


# --- slow: the report in headless Chromium -------------------------------------------------


@pytest.mark.slow
def test_frontier_plot_in_headless_chromium(three):
    """The page as Chromium builds it: the bytes chart's labelled frontier rows are the
    JSON's, each dot links to a row of the commands table, and a screenshot is a picture."""
    from test_compare_report import PageText

    browser = chromium()
    cwd, doc, _, report = three
    url = (cwd / report).as_uri()
    dom = run_chromium(browser, cwd / "profile", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    page = PageText(dom.stdout.decode())
    _check_labels(dom.stdout.decode(), doc["results"])
    anchors = {
        a["href"] for tag, a in page.tags if tag == "a" and a.get("href", "").startswith("#row-")
    }
    ids = {a["id"] for tag, a in page.tags if tag == "tr" and a.get("id", "").startswith("row-")}
    assert anchors and {h[1:] for h in anchors} <= ids
    shot = cwd / "frontier.png"
    run = run_chromium(browser, cwd / "profile", f"--screenshot={shot}",
                       "--window-size=1280,2400", url)  # fmt: skip
    assert run.returncode == 0 and shot.is_file(), run.stderr.decode()[-2000:]
    image = pixels(shot)
    grey = image[..., :3].mean(axis=2)
    assert grey.std() > 0.05 and (grey < 0.5).mean() > 0.002
    purple = (image[..., 0] > 0.4) & (image[..., 2] > 0.8) & (image[..., 1] < 0.35)
    assert purple.sum() > 50  # the frontier's line and dots are drawn


# --- the page's charts from made-up rows (both costs; model names with markup) -------------


def _made_up_rows(seed: int) -> list:
    rnd = random.Random(seed)
    out = []
    for i, name in enumerate(["mean", "cls", "max", "mean/binary", "mean/int8", "cls+mean"]):
        v = round(rnd.uniform(0.2, 0.8), 2)
        out.append(Result(
            Recipe.parse(name), {"ndcg_at_10": v, "mrr_at_10": v, "recall_at_100": v,
                                 "map_at_100": v},
            intended=i == 0, ci={m: (v - 0.05, v + 0.05) for m in ("ndcg_at_10", "mrr_at_10",
                                                                  "recall_at_100", "map_at_100")},
            model="m<b>", model_label=f"m<b>{i % 2}",
            bytes_per_document=rnd.choice([2.0, 64.0, 128.0, 512.0]),
            encode_ms=None if i == 5 else rnd.choice([0.1, 0.5, 2.0, 9.0]), search_ms=0.25,
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(4))
def test_both_charts_label_their_frontier(seed):
    from test_compare_report import PageText

    rows = mark(_made_up_rows(seed), "ndcg_at_10")
    ranked = report.rank(rows, "ndcg_at_10")
    page = Page("retrieval", "m<b>", rows, None, "beir", 10, "queries",
                [("poolkit embed x", None)] * len(rows))  # fmt: skip
    markup = render(page)
    assert "<b>" not in markup  # the model's label is escaped
    parsed = PageText(markup)
    q = [r.metrics["ndcg_at_10"] for r in ranked]
    for chart, cost in (("bytes", lambda r: r.bytes_per_document), ("query", lambda r: r.query_ms)):
        want = [i for i, on in enumerate(reference_frontier(q, [cost(r) for r in ranked]), 1) if on]
        svg = markup[markup.index(f'id="frontier-{chart}"') :]
        svg = svg[: svg.index("</svg>")]
        got = sorted(int(x) for x in re.findall(r'class="frontier-label" data-rank="(\d+)"', svg))
        assert got == want, chart
        dots = re.findall(r'<a href="#row-(\d+)">', svg)
        assert sorted(map(int, dots)) == [i for i, r in enumerate(ranked, 1) if cost(r) is not None]
    ids = {a["id"] for tag, a in parsed.tags if tag == "tr" and "id" in a}
    assert {f"row-{i}" for i in range(1, len(rows) + 1)} <= ids
