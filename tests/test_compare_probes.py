"""The compare probe (L-BFGS logistic regression in torch) against scikit-learn's converged
``StandardScaler`` + ``LogisticRegression`` on the same real vectors of the fixtures:
same coefficients, an objective no worse, and figures within 0.3 points."""

from __future__ import annotations

import numpy as np
import pytest
from testdata import fixture

from poolkit.compare import metrics, probes
from poolkit.compare.candidates import candidates
from poolkit.compare.datasets import read_task
from poolkit.compare.embedding import embed_sequences
from poolkit.compare.runner import Settings, embed_span_pairs, embed_words

pytest.importorskip("sklearn")


def sklearn_probe(x_train: np.ndarray, y_train: np.ndarray):
    """The reference: scikit-learn converged far past the default tolerance, in float64."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = LogisticRegression(C=probes.C, solver="lbfgs", tol=1e-9, max_iter=20000)
    return make_pipeline(StandardScaler(), model).fit(x_train.astype(np.float64), y_train)


def objective(x: np.ndarray, codes: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> float:
    """sklearn's loss in plain NumPy: summed cross-entropy + |coef|^2 / (2 C); ``coef``
    ``(K', D)`` (one row for two classes: binomial)."""
    z = x @ coef.T + intercept
    if coef.shape[0] == 1:
        z = np.concatenate([np.zeros_like(z), z], axis=1)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(codes)), codes].sum() + (coef**2).sum() / (2 * probes.C))


def check_against_sklearn(x_train: np.ndarray, y_train, x_test: np.ndarray) -> np.ndarray:
    """Assert the probe's objective is sklearn's (same optimum); returns the predictions of
    :func:`probes.fit_predict` and of the reference on ``x_test``."""
    y_train = np.asarray(y_train)
    ref = sklearn_probe(x_train, y_train)
    classes, codes = np.unique(y_train, return_inverse=True)
    train, _ = probes.standardize(x_train, x_test)
    # The objective: solved tightly, it is sklearn's optimum.
    w, b = probes.fit_logistic(train, codes, len(classes), tol=1e-7)
    ref_coef, ref_b = ref[-1].coef_, ref[-1].intercept_
    assert w.T.shape == ref_coef.shape
    x64 = ref[0].transform(x_train.astype(np.float64))
    ours, theirs = objective(x64, codes, w.T, b), objective(x64, codes, ref_coef, ref_b)
    assert abs(ours - theirs) <= 1e-4 * theirs, (ours, theirs)
    np.testing.assert_allclose(w.T, ref_coef, atol=0.02 * np.abs(ref_coef).max())
    # The probe as compare runs it (default tolerance): its figures are checked by callers.
    pred = probes.fit_predict(x_train, y_train, x_test)
    assert pred.dtype == y_train.dtype
    return pred, ref.predict(x_test.astype(np.float64))


def test_ner_probe_matches_sklearn_on_wnut17_fixture(minilm):
    train = read_task("ner", fixture("wnut17-train-sample.conll"))
    test = read_task("ner", fixture("wnut17-dev-sample.conll"))
    cands = candidates("word", ["first", "max"], None)
    x_train = embed_words(minilm, train, cands, Settings("ner"), "train")
    x_test = embed_words(minilm, test, cands, Settings("ner"), "test")
    y_train = [t for s in train.tags for t in s]
    assert len(set(y_train)) > 2  # multinomial
    splits = np.cumsum([len(s) for s in test.tags])[:-1]
    for c in cands:
        ours, theirs = check_against_sklearn(x_train[c], y_train, x_test[c])
        f1 = [metrics.entity_f1(test.tags, [list(p) for p in np.split(p, splits)])
              for p in (ours, theirs)]  # fmt: skip
        assert abs(f1[0] - f1[1]) <= 0.003, (c, f1)
        assert np.mean(ours == theirs) >= 0.99


def test_relation_probe_matches_sklearn_on_semeval_fixture(minilm):
    train = read_task("relation", fixture("relations-train.txt"))
    test = read_task("relation", fixture("relations-dev.txt"))
    cands = candidates("span", ["endpoints", "mean"], None)
    x_train = embed_span_pairs(minilm, train, cands, Settings("relation"), "train")
    x_test = embed_span_pairs(minilm, test, cands, Settings("relation"), "test")
    for c in cands:
        ours, theirs = check_against_sklearn(x_train[c], train.labels, x_test[c])
        gold = np.asarray(test.labels)
        assert abs(metrics.macro_f1(gold, ours) - metrics.macro_f1(gold, theirs)) <= 0.003


def test_binary_probe_is_binomial_and_matches_sklearn_under_cv(minilm):
    data = read_task("classification", fixture("sentiment.txt"))
    cands = candidates("sequence", ["mean", "cls+mean"], None)
    x = embed_sequences(minilm, data.texts, cands, Settings("classification"), "x")
    y = np.asarray(data.labels)
    assert len(set(y)) == 2
    for c in cands:
        for train, test in probes.stratified_splits(y, 5):
            ours, theirs = check_against_sklearn(x[c][train], y[train], x[c][test])
            assert abs(metrics.accuracy(y[test], ours) - metrics.accuracy(y[test], theirs)) <= 0.003
