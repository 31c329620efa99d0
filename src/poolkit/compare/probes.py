"""Frozen-encoder probes: L2-regularised logistic regression on standardised vectors.

The probe is the estimator of scikit-learn's ``StandardScaler`` + ``LogisticRegression(C=1)``
(multinomial for three or more labels, binomial for two; intercepts not penalised), solved
here by full-batch L-BFGS in torch: parameters and loss in float64, the two products with
the vectors (one pass over them each per evaluation, the cost that dominates) in float32.
The objective is convex, so the optimum is unique and the solver needs no seed; it stops when
every gradient entry of the mean loss is below :data:`TOL`. ``tests/test_compare_probes.py``
pins the objective and the figures to scikit-learn's converged probe on the fixtures;
``bench/bench_probes.py`` checks the figures on WNUT-17 and times the probes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "SEED",
    "TOL",
    "C",
    "cv_predict",
    "fit_logistic",
    "fit_predict",
    "folds_for",
    "standardize",
    "stratified_splits",
]  # fmt: skip

SEED = 0
C = 1.0  # inverse L2 strength, as sklearn's default
TOL = 1e-5  # max |gradient| of the mean loss at which the solver stops (bench/bench_probes.py)
MAX_ITER = 2000


def standardize(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both ``(N, D)``/``(M, D)`` arrays scaled by the train mean and (population) standard
    deviation (computed in float64), as float32; constant features (variance within
    rounding of zero) keep scale 1, as ``StandardScaler``."""
    x_train = np.asarray(x_train, dtype=np.float64)
    n, eps = len(x_train), np.finfo(np.float64).eps
    mean = x_train.mean(axis=0)
    var = x_train.var(axis=0)
    # A constant column's variance is rounding residue of the mean (it grows with n and
    # |mean|); dividing by its root would blow that residue up to O(1) values.
    std = np.sqrt(var)
    std[var <= n * eps * var + (n * mean * eps) ** 2] = 1.0
    test = (np.asarray(x_test, dtype=np.float64) - mean) / std
    return ((x_train - mean) / std).astype(np.float32), test.astype(np.float32)


def fit_logistic(x: np.ndarray, y: np.ndarray, k: int, c: float = C, tol: float | None = None):
    """Minimise ``mean_i CE(softmax(x_i W + b), y_i) + |W|^2 / (2 c N)`` by L-BFGS.

    ``x`` ``(N, D)`` float, ``y`` ``(N,)`` integer codes in ``[0, k)``. For ``k == 2`` the
    model is binomial (one weight column, the other class's logit fixed at 0, as sklearn);
    otherwise one column per class. Returns ``(W (D, k'), b (k',))`` as NumPy float64.
    """
    import torch

    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    n, d = xt.shape
    cols = 1 if k == 2 else k
    w = torch.zeros(d, cols, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(cols, dtype=torch.float64, requires_grad=True)
    target = torch.from_numpy(np.asarray(y, dtype=np.int64))
    onehot = torch.nn.functional.one_hot(target, k).to(torch.float64)
    reg = 1.0 / (c * n)

    def closure() -> torch.Tensor:
        # Loss and gradient by hand: two matmuls, no autograd graph over (N, D).
        with torch.no_grad():
            z = (xt @ w.float()).double() + b
            if k == 2:
                z = torch.cat([torch.zeros(n, 1, dtype=z.dtype), z], dim=1)
            lse = torch.logsumexp(z, dim=1)
            loss = (lse - z.gather(1, target[:, None])[:, 0]).mean() + 0.5 * reg * (w * w).sum()
            r = (torch.exp(z - lse[:, None]) - onehot) / n
            if k == 2:
                r = r[:, 1:]
            w.grad = (xt.T @ r.float()).double() + reg * w
            b.grad = r.sum(0)
        return loss

    opt = torch.optim.LBFGS(
        [w, b], lr=1.0, max_iter=MAX_ITER, max_eval=2 * MAX_ITER, tolerance_grad=TOL if tol is None else tol,
        tolerance_change=1e-14, history_size=20, line_search_fn="strong_wolfe",
    )  # fmt: skip
    opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def fit_predict(x_train: np.ndarray, y_train: Sequence, x_test: np.ndarray) -> np.ndarray:
    """Train a probe on ``x_train`` ``(N, D)`` with labels ``y_train`` ``(N,)``; predict ``x_test`` ``(M, D)``.

    Returns the predicted labels ``(M,)`` (same dtype as ``y_train``). ``y_train`` must hold at
    least two distinct labels.
    """
    classes, codes = np.unique(np.asarray(y_train), return_inverse=True)
    train, test = standardize(x_train, x_test)
    w, b = fit_logistic(train, codes, len(classes))
    z = test.astype(np.float64) @ w + b
    pick = (z[:, 0] > 0).astype(np.int64) if len(classes) == 2 else z.argmax(axis=1)
    return classes[pick]


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
