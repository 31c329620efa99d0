"""What ``compare`` recommends storing (:mod:`poolkit.compare.recommend`).

Pure: :func:`pick` against a loop written from its definition, on random costs and ties;
the issue's case (a multi-vector #1 tied with ``mean`` and BM25) said in text and JSON.
CLI, in process, on a tiny model and the committed BEIR fixture: the JSON's
``recommended`` rows recomputed from the JSON's own rows and paired intervals, their
commands the rows' own, the text opening with the same answer and the query cost that
includes the search.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from clitools import run_cli

from poolkit.compare import report
from poolkit.compare.bootstrap import Paired
from poolkit.compare.frontier import mark
from poolkit.compare.recommend import Picked, answer_json, answer_lines, budget_hints, pick
from poolkit.compare.sparse_rows import parse_bm25
from poolkit.recipe import Recipe

FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"
METRICS = ("ndcg_at_10", "mrr_at_10", "recall_at_100", "map_at_100")


def reference_pick(first: list, second: list, tied: list[bool], exact: tuple[bool, bool],
                   noise: float = 0.1) -> int | None:  # fmt: skip
    """Row 0 is the best. A tied row *saves* on ``first`` when its ``first`` is known and the
    best's is not, or is below the best's (bytes: at all; times, ``exact`` False: by more
    than ``noise`` of it), or is the same (times: within ``noise`` of the larger) and its
    ``second`` is below the best's. Of the rows that save: the lowest ``first``, then
    ``second`` (unknown last), then rank; none saves: the best, or None where the best's
    ``first`` is unknown. Written as a scan."""

    def below(a, b, ex):
        return a is not None and b is not None and (a < b if ex else a < b * (1 - noise))

    def same(a, b, ex):
        return (
            a is not None and b is not None and (a == b if ex else abs(a - b) <= noise * max(a, b))
        )

    chosen = None
    for i in range(1, len(tied)):
        if not tied[i] or first[i] is None:
            continue
        saves = (first[0] is None or below(first[i], first[0], exact[0])
                 or (same(first[i], first[0], exact[0]) and below(second[i], second[0], exact[1])))  # fmt: skip
        if not saves:
            continue
        a = (first[i], math.inf if second[i] is None else second[i])
        if chosen is None or a < (
            first[chosen],
            math.inf if second[chosen] is None else second[chosen],
        ):
            chosen = i
    if chosen is None and first[0] is not None:
        chosen = 0
    return chosen


@pytest.mark.parametrize("seed", range(30))
def test_pick_is_the_cheapest_tied_row(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    b = [None if rng.random() < 0.2 else float(rng.integers(1, 5)) for _ in range(n)]
    # Times a few per cent apart as well as far apart: the noise rule is exercised.
    q = [None if rng.random() < 0.2 else float(rng.integers(20, 28)) / 20 * rng.choice([1, 2])
         for _ in range(n)]  # fmt: skip
    tied = [bool(i == 0 or rng.random() < 0.5) for i in range(n)]
    got = pick(b, q, tied)
    assert got.best == 0
    assert got.bytes == reference_pick(b, q, tied, (True, False))
    assert got.query == reference_pick(q, b, tied, (False, True))
    for i in (got.bytes, got.query):
        assert i is None or tied[i]


def test_the_best_counts_as_tied_and_unknown_costs_never_win():
    assert pick([None, 1.0], [None, 1.0], [False, False]) == pick([None, 1.0], [None, 1.0],
                                                                   [True, False])  # fmt: skip
    p = pick([None, 5.0, 2.0], [3.0, None, 9.0], [True, True, True])
    assert (p.bytes, p.query) == (2, 0)


def test_a_row_that_saves_nothing_does_not_replace_the_best():
    """Same bytes, a query time 1% lower (timing noise): #1 stays; 20% lower: it is named."""
    assert pick([1536.0, 1536.0], [5.91, 5.85], [True, True]) == Picked(0, 0, 0)
    assert pick([1536.0, 1536.0], [5.91, 4.70], [True, True]) == Picked(0, 1, 1)
    assert pick([1536.0, 768.0], [5.91, 5.95], [True, True]) == Picked(0, 1, 1)
    assert pick([1536.0, 768.0], [5.91, 5.95], [True, False]) == Picked(0, 0, 0)


def _row(name: str, ndcg: float, nbytes: float, encode: float, search: float,
         vs: tuple[float, float, float] | None, intended: bool = False) -> report.Result:  # fmt: skip
    d = None if vs is None else Paired(vs[0], (vs[1], vs[2]))
    return report.Result(
        parse_bm25(name) or Recipe.parse(name), dict.fromkeys(METRICS, ndcg), intended=intended,
        ci=dict.fromkeys(METRICS, (ndcg - 0.03, ndcg + 0.03)), vs_best=d, vs_intended=d,
        bytes_per_document=nbytes, encode_ms=encode, search_ms=search,
        search_growth="linear in N",
    )  # fmt: skip


def issue_rows() -> list[report.Result]:
    """The issue's SciFact slice: multi-vector #1, tied with mean and BM25, 240x the bytes."""
    return mark([
        _row("multivector:tokens/l2", 0.70, 367288, 0.06, 43.0, None),
        _row("cls+mean", 0.69, 2350, 0.08, 0.9, (-0.01, -0.03, 0.01)),
        _row("mean", 0.68, 1536, 0.06, 0.6, (-0.02, -0.05, 0.01), intended=True),
        _row("bm25", 0.66, 814, 0.02, 0.3, (-0.04, -0.09, 0.002)),
        _row("cls", 0.50, 1536, 0.06, 0.6, (-0.2, -0.3, -0.1)),
    ], "ndcg_at_10")  # fmt: skip


def test_the_issue_case_recommends_bm25_with_its_savings():
    ranked = report.rank(issue_rows(), "ndcg_at_10")
    boot = report.bootstrap_info("retrieval", 1000, 0, 300)
    lines = answer_lines("retrieval", ranked, boot, lambda r: f"CMD {r.name}")
    assert lines[0] == (
        "best: #1 multivector:tokens/l2 (ndcg_at_10 0.7000; 367288 bytes/doc, 43.06 ms/query)"
    )
    assert lines[1] == (
        "cheapest tied with #1 by bytes/doc and by query time: #4 bm25 (ndcg_at_10 0.6600, "
        "vs #1 \u22120.0400 [\u22120.0900, +0.0020]; 814 bytes/doc, 0.32 ms/query)."
    )
    assert lines[2] == (
        "#4 bm25 is not the best point estimate but saves 366474 bytes/doc and 42.74 "
        "ms/query against #1, at a ndcg_at_10 the paired test cannot tell from #1's."
    )
    assert lines[3].startswith("budgets: --max-bytes-per-doc 814 #4 bm25, 1536 #3 mean")
    assert lines[-2:] == ["embed #1 multivector:tokens/l2: CMD multivector:tokens/l2",
                          "embed #4 bm25: CMD bm25"]  # fmt: skip
    doc = answer_json("retrieval", ranked, lambda r: f"CMD {r.name}")
    assert doc["best"]["name"] == "multivector:tokens/l2" and doc["best"]["vs_best"] is None
    for key in ("cheapest_tied_bytes", "cheapest_tied_query"):
        row = doc[key]
        assert (row["rank"], row["name"], row["embed_command"]) == (4, "bm25", "CMD bm25")
        assert row["saves"]["bytes"] == pytest.approx(367288 - 814)
        assert row["saves"]["query_ms"] == pytest.approx(43.06 - 0.32)
    # The query frontier is on the whole cost: the multi-vector row's 43 ms search counts.
    assert not ranked[0].frontier_query and ranked[3].frontier_query


def test_budget_hints_pick_the_row_they_name():
    from poolkit.compare.frontier import COSTS, best_within, costs

    ranked = report.rank(issue_rows(), "ndcg_at_10")
    quality = np.array([r.metrics["ndcg_at_10"] for r in ranked])
    for line in budget_hints(ranked, "ndcg_at_10"):
        flag, rest = line.split(" ", 1)
        cost = costs(ranked, COSTS[flag][1])
        for part in rest.split(", "):
            limit, rank, _ = part.split(" ", 2)
            assert best_within(quality, cost, float(limit)) == int(rank[1:]) - 1, line


def test_without_intervals_no_row_is_said_to_tie():
    rows = [_row("mean", 0.7, 1536, 0.1, 0.5, None), _row("bm25", 0.69, 800, 0.02, 0.2, None)]
    ranked = report.rank(rows, "ndcg_at_10")
    lines = answer_lines("retrieval", ranked, None, lambda r: "CMD")
    assert lines[1] == "cheapest tied with #1: no row named (no paired test with --bootstrap 0)."
    doc = answer_json("retrieval", ranked)
    assert doc["cheapest_tied_bytes"]["rank"] == doc["cheapest_tied_query"]["rank"] == 1


# --- the CLI, in process, on a tiny model --------------------------------------------------


@pytest.fixture(scope="module")
def run(tiny_dirs, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("recommend")
    out = run_cli(["compare", str(FIXTURE), "--task", "retrieval", "--model",
                   str(tiny_dirs["bert_cls"]), "--recipes", "mean", "cls", "max", "bm25",
                   "rrf(mean,bm25)", "mean/16/int8", "mean/binary", "--bootstrap", "200",
                   "--json", "r.json", "--quiet"], cwd=cwd)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    return json.loads((cwd / "r.json").read_text()), out.stdout.decode()


def test_recommended_rows_recomputed_from_the_json(run):
    """The JSON's ``recommended`` rows are the cheapest rows whose paired interval against
    the best (each row's ``vs_best``) includes 0 and that save against it, by bytes (ties:
    the query cost) and by the whole query cost (ties: bytes); their commands are those
    rows' commands."""
    doc, _ = run
    rows = doc["results"]
    tied = [i == 0 or r["vs_best"]["ci"][0] <= 0 <= r["vs_best"]["ci"][1]
            for i, r in enumerate(rows)]  # fmt: skip
    assert rows[0]["vs_best"] is None
    for r in rows[1:]:  # the paired difference is the point values' difference
        assert r["vs_best"]["value"] == pytest.approx(r["ndcg_at_10"] - rows[0]["ndcg_at_10"])
    for key, first, second, exact in (
        ("cheapest_tied_bytes", "bytes_per_document", "query_ms", (True, False)),
        ("cheapest_tied_query", "query_ms", "bytes_per_document", (False, True)),
    ):
        want = reference_pick([r[first] for r in rows], [r[second] for r in rows], tied, exact)
        got = doc["recommended"][key]
        assert got["rank"] == want + 1, key
        assert got["embed_command"] == rows[want]["embed_command"]
        assert got["bytes"] == rows[want]["bytes_per_document"]
        assert got["query_ms"] == rows[want]["query_ms"]
    best = doc["recommended"]["best"]
    assert (best["rank"], best["embed_command"]) == (1, rows[0]["embed_command"])


def test_every_query_cost_includes_its_search(run):
    doc, stdout = run
    for r in doc["results"]:
        assert r["query_ms"] == pytest.approx(r["encode_ms"] + r["search_ms"]), r["recipe"]
        assert r["search_ms"] > 0
    head = stdout.split("\n\n", 1)[1].splitlines()[0]
    assert "query ms" in head and "search ms" not in head  # one column: the whole cost


def test_the_text_opens_with_the_answer_and_its_commands(run):
    doc, stdout = run
    answer, table = stdout.split("\n\n", 1)
    lines = answer.splitlines()
    rows, rec = doc["results"], doc["recommended"]
    assert lines[0].startswith(f"best: #1 {rows[0]['recipe']} (ndcg_at_10 ")
    for key in ("best", "cheapest_tied_bytes", "cheapest_tied_query"):
        row = rec[key]
        assert f"embed #{row['rank']} {row['name']}: {row['embed_command']}" in lines
    assert table.splitlines()[0].startswith("#  recipe")
    assert report.EXPLAIN_HINT in table and "bytes/doc: what an index stores" not in table


def test_budget_hints_do_not_split_times_within_the_noise():
    """Two tied rows of the same bytes, 2.93 and 2.94 ms: no --max-query-ms hint (CI's
    docs example of 2026-12-07 printed one); 1.0 vs 2.94 ms: the hint."""
    rows = [_row("mean", 0.92, 1536, 2.9, 0.04, None, intended=True),
            _row("mean_no_special", 0.91, 1536, 2.9, 0.03, (-0.01, -0.02, 0.01))]  # fmt: skip
    ranked = report.rank(rows, "ndcg_at_10")
    assert budget_hints(ranked, "ndcg_at_10") == []
    rows[1] = _row("mean_no_special", 0.91, 1536, 0.9, 0.1, (-0.01, -0.02, 0.01))
    ranked = report.rank(rows, "ndcg_at_10")
    assert budget_hints(ranked, "ndcg_at_10") == [
        "--max-query-ms 1 #2 mean_no_special, 2.94 #1 mean"
    ]
