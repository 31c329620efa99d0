"""Frozen-encoder probes: logistic regression on standardised vectors, deterministic.

The probe is scikit-learn's ``StandardScaler`` + ``LogisticRegression(C=1)`` estimator
(multinomial for three or more labels, binomial for two, intercepts not penalised), solved
by :mod:`poolkit.compare.logistic` (preconditioned L-BFGS) instead of scikit-learn's
newton-cg, which dominated `compare`'s run time on token-level tasks.
``tests/test_compare_probes.py`` pins its figures to scikit-learn's converged probe;
``bench/bench_probes.py`` checks them on WNUT-17 and times the probes against embedding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from poolkit.compare import logistic

__all__ = ["SEED", "cv_predict", "fit_predict", "folds_for", "stratified_splits"]

SEED = 0


def _fit_predict(
    x_train: np.ndarray, y_train: Sequence, x_test: np.ndarray, init: tuple | None
) -> tuple[np.ndarray, tuple[np.ndarray, logistic.Fit]]:
    """Predictions ``(M,)`` and ``(classes, fit)``; ``init``, such a pair from another fit,
    warm-starts this one when it saw the same classes (and so has the same shape)."""
    classes, codes = np.unique(np.asarray(y_train), return_inverse=True)
    train, test = logistic.standardize(x_train, x_test)
    same = (
        init is not None
        and np.array_equal(init[0], classes)
        and init[1].coef.shape[0] == train.shape[1]
    )
    model = logistic.fit(train, codes, len(classes), init=init[1] if same else None)
    return classes[model.predict(test)], (classes, model)


def fit_predict(x_train: np.ndarray, y_train: Sequence, x_test: np.ndarray) -> np.ndarray:
    """Train a probe on ``x_train`` ``(N, D)`` with labels ``y_train`` ``(N,)``; predict ``x_test`` ``(M, D)``.

    Returns the predicted labels ``(M,)`` (same dtype as ``y_train``). ``y_train`` must hold at
    least two distinct labels.
    """
    return _fit_predict(x_train, y_train, x_test, None)[0]


def folds_for(labels: Sequence[str], wanted: int = 5) -> int:
    """Number of stratified folds usable for ``labels``: ``wanted``, or fewer when the rarest
    label has fewer examples (it must have at least 2; callers check that)."""
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    return int(min(wanted, counts.min()))


def cv_predict(x: np.ndarray, y: Sequence, folds: int, splits: list | None = None) -> np.ndarray:
    """Out-of-fold predictions ``(N,)`` from stratified ``folds``-fold cross-validation.

    ``x`` is ``(N, D)``; ``y`` ``(N,)``. ``splits`` (from :func:`stratified_splits`) lets many
    candidates share one split; by default it is made here with the fixed seed.
    """
    y_a = np.asarray(y)
    pred = np.empty_like(y_a)
    model = None
    for train, test in splits if splits is not None else stratified_splits(y_a, folds):
        # Folds share most rows, so each fit starts from the previous fold's optimum.
        pred[test], model = _fit_predict(x[train], y_a[train], x[test], model)
    return pred


def stratified_splits(y: Sequence, folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled stratified (train, test) index pairs with the fixed seed."""
    from sklearn.model_selection import StratifiedKFold

    y_a = np.asarray(y)
    kfold = StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED)
    return list(kfold.split(np.zeros(len(y_a)), y_a))
