"""Frozen-encoder probes: logistic regression on fixed vectors, fixed seed."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["SEED", "cv_predict", "fit_predict", "folds_for", "stratified_splits"]

SEED = 0


def _probe():  # -> sklearn Pipeline; imported late so `poolkit` loads without sklearn
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # Scaling puts every strategy on one footing (max and sum pooling have very different
    # ranges). newton-cg reaches the same optimum as lbfgs in a few Newton steps and is
    # several times faster on wide, concatenated features.
    model = LogisticRegression(solver="newton-cg", tol=1e-6, max_iter=1000, random_state=SEED)
    return make_pipeline(StandardScaler(), model)


def fit_predict(x_train: np.ndarray, y_train: Sequence, x_test: np.ndarray) -> np.ndarray:
    """Train a probe on ``x_train`` ``(N, D)`` with labels ``y_train`` ``(N,)``; predict ``x_test`` ``(M, D)``.

    Returns the predicted labels ``(M,)`` (same dtype as ``y_train``). ``y_train`` must hold at
    least two distinct labels.
    """
    from sklearn.exceptions import ConvergenceWarning

    model = _probe()
    with warnings.catch_warnings():
        # A probe that stops at max_iter is still a fair comparison point.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(np.asarray(x_train, dtype=np.float32), np.asarray(y_train))
    return model.predict(np.asarray(x_test, dtype=np.float32))


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
    for train, test in splits if splits is not None else stratified_splits(y_a, folds):
        pred[test] = fit_predict(x[train], y_a[train], x[test])
    return pred


def stratified_splits(y: Sequence, folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled stratified (train, test) index pairs with the fixed seed."""
    from sklearn.model_selection import StratifiedKFold

    y_a = np.asarray(y)
    kfold = StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED)
    return list(kfold.split(np.zeros(len(y_a)), y_a))
