"""The paired bootstrap of `poolkit compare` against materialised resamples scored by
scipy / scikit-learn / plain Python, one resample at a time."""

from __future__ import annotations

import numpy as np
import pytest
from metric_reference import entity_f1_reference
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, v_measure_score

from poolkit.compare import bootstrap as bs
from poolkit.compare.evaluation import ClusterEval, LabelEval, PairEval, QueryEval, TagEval
from poolkit.compare.grouping import groups
from poolkit.compare.report import Result, rank, table, tied
from poolkit.compare.summary import Row, summarize
from poolkit.recipe import Recipe

RESAMPLES = 60


def indices(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """The documented draw: one ``rng.integers(0, n, (resamples, n))`` call."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def counts(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    return np.concatenate(list(bs.resample_counts(n, resamples, seed)))


def test_counts_are_the_documented_indices_and_blocks_split_the_stream():
    idx = indices(50)
    expected = np.stack([np.bincount(row, minlength=50) for row in idx])
    np.testing.assert_array_equal(counts(50), expected)
    assert (counts(50).sum(axis=1) == 50).all()
    # Several blocks: each block is the next call on the same generator.
    old = bs.BLOCK_ELEMENTS
    try:
        bs.BLOCK_ELEMENTS = 50 * 7
        blocks = list(bs.resample_counts(50, 20, 3))
    finally:
        bs.BLOCK_ELEMENTS = old
    assert [len(b) for b in blocks] == [7, 7, 6]
    # ... and the blocks together are the one documented call.
    idx = indices(50, 20, 3)
    np.testing.assert_array_equal(
        np.concatenate(blocks), [np.bincount(r, minlength=50) for r in idx]
    )


def test_correlations_on_resamples_match_scipy_with_ties():
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 6, 80).astype(float)  # many ties, like STS-B's scores
    cos = np.round(gold + rng.normal(size=80), 1)  # ties in the predictions too
    got = PairEval(cos, gold).resampled(counts(80))
    for r, idx in enumerate(indices(80)):
        assert got[r, 0] == pytest.approx(stats.spearmanr(cos[idx], gold[idx]).statistic, abs=1e-12)
        assert got[r, 1] == pytest.approx(stats.pearsonr(cos[idx], gold[idx]).statistic, abs=1e-12)


def test_labels_on_resamples_match_sklearn_including_absent_classes():
    rng = np.random.default_rng(1)
    gold = rng.choice(["a", "b", "c", "rare"], 40, p=[0.4, 0.3, 0.27, 0.03])
    pred = np.where(rng.random(40) < 0.6, gold, rng.choice(["a", "b", "e"], 40))
    got = LabelEval(gold, pred, main_first=False).resampled(counts(40))
    for r, idx in enumerate(indices(40)):
        assert got[r, 0] == pytest.approx(
            f1_score(gold[idx], pred[idx], average="macro"), abs=1e-12
        )
        assert got[r, 1] == pytest.approx(accuracy_score(gold[idx], pred[idx]), abs=1e-12)


def test_entities_on_resamples_match_the_conlleval_reference():
    rng = np.random.default_rng(2)
    alphabet = ["O", "O", "O", "B-A", "I-A", "B-B", "I-B"]
    gold = [list(rng.choice(alphabet, rng.integers(1, 9))) for _ in range(30)]
    pred = [[t if rng.random() < 0.7 else rng.choice(alphabet) for t in s] for s in gold]
    got = TagEval(gold, pred).resampled(counts(30))
    for r, idx in enumerate(indices(30)):
        g, p = [gold[i] for i in idx], [pred[i] for i in idx]
        assert got[r, 0] == pytest.approx(entity_f1_reference(g, p), abs=1e-12)
        flat = [a == b for s, q in zip(g, p, strict=True) for a, b in zip(s, q, strict=True)]
        assert got[r, 1] == pytest.approx(np.mean(flat), abs=1e-12)


def test_v_measure_and_query_means_on_resamples():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 70)
    clusters = np.stack([np.where(rng.random(70) < 0.7, labels, rng.integers(0, 4, 70))
                         for _ in range(3)])  # fmt: skip
    got = ClusterEval(labels, clusters).resampled(counts(70))
    per_query = rng.random((70, 4))
    means = QueryEval(per_query).resampled(counts(70))
    for r, idx in enumerate(indices(70)):
        expected = np.mean([v_measure_score(labels[idx], c[idx]) for c in clusters])
        assert got[r, 0] == pytest.approx(expected, abs=1e-12)
        np.testing.assert_allclose(means[r], per_query[idx].mean(axis=0), atol=1e-12)


def test_resampled_with_unit_counts_is_the_point_value():
    rng = np.random.default_rng(4)
    gold = rng.integers(0, 6, 50).astype(float)
    ev = PairEval(gold + rng.normal(size=50), gold)
    np.testing.assert_allclose(ev.resampled(np.ones((1, 50)))[0], ev.point(), atol=1e-12)


def test_intervals_and_paired_test_match_a_plain_reference():
    rng = np.random.default_rng(5)
    gold = rng.normal(size=120)
    good, worse = gold + 0.3 * rng.normal(size=120), gold + 0.9 * rng.normal(size=120)
    evals = {"good": PairEval(good, gold), "worse": PairEval(worse, gold)}
    rows = [Row("good", Recipe("mean"), ("mean",), intended=True),
            Row("worse", Recipe("cls"), ("cls",))]  # fmt: skip
    results = {r.strategy: r for r in summarize("sts", rows, evals, RESAMPLES, 0)}
    idx = indices(120)
    rho = {k: np.array([stats.spearmanr(x[i], gold[i]).statistic for i in idx])
           for k, x in (("good", good), ("worse", worse))}  # fmt: skip
    lo, hi = np.percentile(rho["worse"], [2.5, 97.5])
    assert results["cls"].ci["spearman"] == pytest.approx((lo, hi), abs=1e-9)
    diff = np.percentile(rho["worse"] - rho["good"], [2.5, 97.5])
    assert results["cls"].vs_intended.ci == pytest.approx(tuple(diff), abs=1e-9)
    assert results["cls"].vs_intended.significant == (diff[1] < 0 or diff[0] > 0)
    assert results["cls"].vs_intended.significant  # 0.3 vs 0.9 noise: a real difference
    assert results["mean"].vs_intended is None
    assert summarize("sts", rows, evals, 0)[0].ci == {}


def test_rows_that_cannot_differ_are_merged_only_under_cosine():
    cands = [Recipe(s) for s in ("cls", "sum", "mean", "mean_sqrt_len", "mean_no_special",
                                    "sum_no_special", "cls+mean")]  # fmt: skip
    got = groups(cands, "sts", Recipe("mean"))
    assert [tuple(c.strategy for c in g) for g in got] == [
        ("cls",), ("mean", "sum", "mean_sqrt_len"), ("mean_no_special", "sum_no_special"),
        ("cls+mean",),
    ]  # fmt: skip
    assert [g[0].strategy for g in groups(cands, "retrieval")][:2] == ["cls", "sum"]
    assert len(groups(cands, "classification")) == len(cands)
    layered = [
        Recipe("mean"),
        Recipe("sum", layers="last4"),
        Recipe("sum"),
        Recipe("mean", normalize=False),
        Recipe("mean", layers="last4", layer_how="sum"),
    ]
    # Only recipes that differ in nothing but the scale-family strategy merge.
    assert [len(g) for g in groups(layered, "sts")] == [2, 1, 1, 1]


def test_ties_put_the_intended_row_first_and_are_marked():
    rows = [Result(Recipe("cls"), {"accuracy": 1.0, "macro_f1": 1.0}),
            Result(Recipe("max"), {"accuracy": 0.9, "macro_f1": 0.9}),
            Result(Recipe("mean"), {"accuracy": 1.0, "macro_f1": 1.0}, intended=True)]  # fmt: skip
    ranked = rank(rows, "accuracy")
    assert [r.strategy for r in ranked] == ["mean", "cls", "max"]
    assert tied(ranked, "accuracy") == [True, True, False]
    text = table("classification", rows)
    assert [line.split()[0] for line in text.splitlines()[2:5]] == ["1=", "1=", "3"]
    assert "rows tied on accuracy: ordered intended first" in text
