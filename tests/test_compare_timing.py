"""How ``compare`` times each row's search (:mod:`poolkit.compare.timing`): the rounds
are the ones :data:`~poolkit.compare.timing.SEARCH_TIMING` describes, a slow search is
timed once, the timed call's result is the search's, and a retrieval run's JSON and
footer state that method. No assertion on how fast anything is."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from clitools import poolkit
from tiny_models import build_family

from poolkit.compare.search import id_order, top_k
from poolkit.compare.timing import (
    ROUND_SECONDS,
    ROUNDS,
    ROW_SECONDS,
    SEARCH_TIMING,
    repeat_rounds,
    timed_depths,
    timed_search,
)

pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")
SQUAD = Path(__file__).parent / "data" / "squad-titled-retrieval"


class _Counted:
    """A real search (exact top-10 of random vectors) that counts its calls."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.queries = rng.standard_normal((8, 16)).astype(np.float32)
        self.documents = rng.standard_normal((50, 16)).astype(np.float32)
        self.ties = id_order([f"d{i}" for i in range(50)])
        self.calls = 0

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        return top_k(self.queries, self.documents, 10, self.ties)


def test_rounds_are_the_stated_method() -> None:
    search = _Counted()
    rounds = repeat_rounds(search, first=0.0)
    assert len(rounds) == ROUNDS
    # Each round's seconds are CPU time of this thread: positive, never above the round's
    # wall-clock time, which is at least ROUND_SECONDS (checked on the calls' count).
    assert all(calls >= 1 and 0 < seconds for calls, seconds in rounds)
    assert search.calls == sum(calls for calls, _ in rounds)
    assert "CPU time per call on one thread" in SEARCH_TIMING
    assert f"fastest of {ROUNDS} rounds" in SEARCH_TIMING
    assert f">= {ROUND_SECONDS * 1000:.0f} ms" in SEARCH_TIMING
    assert f"over {ROW_SECONDS:g} s" in SEARCH_TIMING


@pytest.mark.parametrize("first", [ROW_SECONDS / 2.5, ROW_SECONDS / 1.5, ROW_SECONDS])
def test_rounds_bounded_by_the_row_budget(first: float) -> None:
    # A search that took `first` seconds once gets only the rounds that fit ROW_SECONDS.
    search = _Counted()
    rounds = repeat_rounds(search, first)
    assert len(rounds) == int(ROW_SECONDS / first)
    assert search.calls == sum(calls for calls, _ in rounds)


def test_slow_search_timed_once_and_result_kept() -> None:
    calls = []

    def slow(x: int) -> int:
        calls.append(x)
        start = time.thread_time()
        while time.thread_time() - start < ROW_SECONDS:  # busy: CPU time is what is timed
            pass
        return x * 2

    result, seconds = timed_search(slow, 21)
    assert result == 42 and calls == [21] and seconds >= ROW_SECONDS


def test_search_cpu_time_excludes_waiting() -> None:
    # A search that waits (sleeps) costs no CPU: time the machine gives others is not its.
    def waits() -> None:
        time.sleep(ROUND_SECONDS / 4)

    _, seconds = timed_search(waits)
    assert seconds < ROUND_SECONDS / 8


def test_blas_held_to_one_thread_while_timed() -> None:
    from threadpoolctl import threadpool_info

    seen: list[list[int]] = []

    def search() -> None:
        seen.append([lib["num_threads"] for lib in threadpool_info()])

    timed_search(search)
    assert seen and all(threads and set(threads) == {1} for threads in seen)

    search = _Counted()
    (ranked, scores), _ = timed_search(top_k, search.queries, search.documents, 10, search.ties)
    want_ranked, want_scores = search()
    np.testing.assert_array_equal(ranked, want_ranked)
    np.testing.assert_array_equal(scores, want_scores)


def test_json_and_footer_state_the_method(tmp_path: Path) -> None:
    tiny = build_family("distilbert", tmp_path / "distilbert")
    out = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "cls", "cls/binary",
                  "bm25", "--model", str(tiny), "--bootstrap", "0", "--json", "out.json",
                  cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["costs_measured_on"]["search_timing"] == SEARCH_TIMING
    names = {r["recipe"] + (" +rescore" if r.get("rescore") else "") for r in doc["results"]}
    assert {"cls", "cls/binary", "cls/binary +rescore", "bm25"} <= names
    assert all(r["search_ms"] > 0 for r in doc["results"])
    assert all(r["query_ms"] == r["encode_ms"] + r["search_ms"] for r in doc["results"])
    assert f"the search: {SEARCH_TIMING}" not in " ".join(out.stdout.decode().split())
    explained = poolkit("compare", str(SQUAD), "--task", "retrieval", "--recipes", "cls",
                        "--model", str(tiny), "--bootstrap", "0", "--explain", cwd=tmp_path)  # fmt: skip
    assert f"the search: {SEARCH_TIMING}" in " ".join(explained.stdout.decode().split())


def test_depths_timed_apart_where_a_hybrid_searches_deeper() -> None:
    # The row's own search (its top 10 here) and the deeper one a hybrid fuses (top 40) are
    # timed apart; the result is the deeper search's. Not deeper: one search, one time.
    search = _Counted()
    asked: list[int] = []

    def by_depth(k: int) -> tuple[np.ndarray, np.ndarray]:
        asked.append(k)
        return top_k(search.queries, search.documents, k, search.ties)

    (ranked, _), own, fused = timed_depths(by_depth, 10, 40)
    assert ranked.shape == (8, 40) and set(asked) == {10, 40} and own > 0 and fused > 0
    np.testing.assert_array_equal(ranked, by_depth(40)[0])
    asked.clear()
    (ranked, _), own, fused = timed_depths(by_depth, 10, 0)
    assert ranked.shape == (8, 10) and set(asked) == {10} and own == fused
