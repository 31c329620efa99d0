"""Frozen-encoder probes: logistic regression on standardised vectors, deterministic.

The probe is scikit-learn's ``StandardScaler`` + ``LogisticRegression(C=1)``; two solvers
reach its optimum, the faster for the problem's shape is used (:func:`solver_for`):
``"lbfgs"`` (:mod:`poolkit.compare.logistic`, for many rows per feature: WNUT-17's
`first` candidate 2.4 s against newton-cg's 33.9 s, the same predictions) and
scikit-learn's ``"newton-cg"`` (wide features on few rows: SemEval-2010's 768-2304-d
candidates 45 s against L-BFGS's 68 s). ``tests/test_compare_probes.py`` pins the L-BFGS
figures to scikit-learn's converged probe; ``bench/bench_probes.py`` times them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np

from poolkit.compare import logistic

__all__ = ["SEED", "Solver", "cv_predict", "fit_predict", "folds_for", "solver_for",
           "stratified_splits"]  # fmt: skip

SEED = 0
Solver = Literal["auto", "lbfgs", "newton-cg"]
# L-BFGS wins once rows outnumber features this many times over (WNUT-17: 80-160x, much
# faster; SST-2's 384-d candidates: 18x, as fast; SemEval-2010's 768-2304-d: 3-8x, slower).
_ROWS_PER_FEATURE = 10


def solver_for(rows: int, features: int) -> Literal["lbfgs", "newton-cg"]:
    """The faster solver for a ``rows`` x ``features`` training matrix."""
    return "lbfgs" if rows >= _ROWS_PER_FEATURE * features else "newton-cg"


def _newton_cg(train: np.ndarray, codes: np.ndarray) -> object:
    # Imported late so that `poolkit` loads without scikit-learn.
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(solver="newton-cg", tol=1e-6, max_iter=1000, random_state=SEED)
    with warnings.catch_warnings():
        # A probe that stops at max_iter is still a fair comparison point.
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(train, codes)


def _fit_predict(
    x_train: np.ndarray, y_train: Sequence, x_test: np.ndarray, init: tuple | None,
    solver: Solver = "auto",
) -> tuple[np.ndarray, tuple[np.ndarray, logistic.Fit] | None]:  # fmt: skip
    """Predictions ``(M,)`` and, from L-BFGS, ``(classes, fit)``; ``init``, such a pair from
    another fit, warm-starts this one when it saw the same classes (and so has the same
    shape)."""
    classes, codes = np.unique(np.asarray(y_train), return_inverse=True)
    train, test = logistic.standardize(x_train, x_test)
    if solver == "auto":
        solver = solver_for(*train.shape)
    if solver == "newton-cg":
        return classes[_newton_cg(train, codes).predict(test)], None
    same = (
        init is not None
        and np.array_equal(init[0], classes)
        and init[1].coef.shape[0] == train.shape[1]
    )
    model = logistic.fit(train, codes, len(classes), init=init[1] if same else None)
    return classes[model.predict(test)], (classes, model)


def fit_predict(
    x_train: np.ndarray, y_train: Sequence, x_test: np.ndarray, solver: Solver = "auto"
) -> np.ndarray:
    """Train a probe on ``x_train`` ``(N, D)`` with labels ``y_train`` ``(N,)``; predict ``x_test`` ``(M, D)``.

    Returns the predicted labels ``(M,)`` (same dtype as ``y_train``). ``y_train`` must hold at
    least two distinct labels. ``solver``: ``"auto"`` (:func:`solver_for`) or one by name.
    """
    return _fit_predict(x_train, y_train, x_test, None, solver)[0]


def folds_for(labels: Sequence[str], wanted: int = 5) -> int:
    """Number of stratified folds usable for ``labels``: ``wanted``, or fewer when the rarest
    label has fewer examples (it must have at least 2; callers check that)."""
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    return int(min(wanted, counts.min()))


def cv_predict(
    x: np.ndarray, y: Sequence, folds: int, splits: list | None = None, solver: Solver = "auto"
) -> np.ndarray:
    """Out-of-fold predictions ``(N,)`` from stratified ``folds``-fold cross-validation.

    ``x`` is ``(N, D)``; ``y`` ``(N,)``. ``splits`` (from :func:`stratified_splits`) lets many
    candidates share one split; by default it is made here with the fixed seed. ``solver``
    as for :func:`fit_predict`.
    """
    y_a = np.asarray(y)
    pred = np.empty_like(y_a)
    model = None
    for train, test in splits if splits is not None else stratified_splits(y_a, folds):
        # Folds share most rows, so each fit starts from the previous fold's optimum.
        pred[test], model = _fit_predict(x[train], y_a[train], x[test], model, solver)
    return pred


def stratified_splits(y: Sequence, folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled stratified (train, test) index pairs with the fixed seed."""
    from sklearn.model_selection import StratifiedKFold

    y_a = np.asarray(y)
    kfold = StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED)
    return list(kfold.split(np.zeros(len(y_a)), y_a))
