"""L2-regularised logistic regression (scikit-learn's objective), solved by preconditioned L-BFGS.

The objective is scikit-learn's ``LogisticRegression(C)`` loss scaled by ``1/N`` (the
optimum does not change)::

    mean_i CE(softmax(x_i W + b), y_i) + |W|^2 / (2 C N)

multinomial for three or more classes, binomial (one column, the other class's logit fixed
at 0) for two; ``b`` is not penalised. The problem is convex with a unique optimum: no seed.

Why preconditioning: with ``C = 1`` on tens of thousands of rows the Hessian is badly
conditioned and plain L-BFGS needs hundreds of passes over the data (WNUT-17, 62 730 words,
13 tags: 158-322 iterations per word candidate; preconditioned: 45-61). L-BFGS runs in
coordinates where an approximate Hessian is the identity, in stages:

1. for :data:`REFRESH_AT` iterations, the Hessian at the start (``W = 0``, logits at the log
   class frequencies), exactly ``(X^T X / N) (x) (diag(p) - p p^T)``; its
   eigendecomposition (``X^T X`` on a sample of rows) costs about a few gradients;
2. then, from the point reached, the curvature where it has gone: with logits relative to
   the most frequent class, each other class ``j``'s block ``sum_i p_ij (1 - p_ij) [x_i 1]^T
   [x_i 1] / N`` over the rows where that weight is not negligible, factored by Cholesky
   (the blocks between two classes, from rows torn between two non-reference classes, are
   left out; for two classes the one block is the exact Hessian);
3. near the optimum the decrease left drops below a float32 loss's rounding and the line
   search fails, where depending on the CPU's float32 kernels (an Intel Xeon's moved one
   WNUT-17 fixture word's label); the evaluations then switch to float64 (each block cast
   as it is read) and L-BFGS restarts from the point reached, in the same coordinates,
   until :data:`TOL` is met on every CPU, and with it the same predictions wherever the
   optimum decides them. Only a float64 line search finding no lower value stops short.

Each gradient is two float32 products with ``X``, block by block of :data:`BLOCK` rows (a
block read from memory once for both, its softmax run while it is in cache), on as many
threads as the process may use; each block's sums are float64 and added in block order, so
the result does not depend on the thread count. Parameters, loss and the stopping test are
float64.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from poolkit._cpus import available_cpus

__all__ = ["BLOCK", "MAX_ITER", "REFRESH_AT", "TOL", "C", "Fit", "fit", "standardize"]

C = 1.0  # inverse L2 strength: scikit-learn's default
# Max |gradient| (mean-scaled) to stop at. On WNUT-17's fixture it leaves logits 1e-3..4e-3
# from the exact optimum, where scikit-learn's newton-cg at its tol 1e-6 leaves 5e-3..5e-2;
# 1e-8 (2e-4..4e-4) cost WNUT-17's five probes 60% more work, most of it in float64.
TOL = 1e-7
MAX_ITER = 3000
REFRESH_AT = 30  # iterations of the first stage (WNUT-17: 20-40 took 10.8-13 s over five probes)
_CURVATURE_CUT = 1e-2  # rows below this share of a class's largest weight leave its block
_MAX_BLOCKS = 2**25  # float64 entries the second stage's blocks may take (256 MiB)
_MAX_LINE_SEARCH = 8  # evaluations per float32 line search: past ~3e-7 its rounding defeats it
BLOCK = 2048  # rows per block (3 MiB of 384 float32 features: a core's share of the cache)
_PAD = 16  # logit columns padded to a multiple of this: a 13-wide product ran at 0.6x the speed
_SAMPLE_ROWS = 16384  # rows used to build the preconditioner (its quality, not the optimum)


class Fit:
    """A fitted model: ``coef`` ``(D, M)`` and ``intercept`` ``(M,)`` float64 (``M`` = 1 for
    two classes), ``iterations`` and ``grad_max`` (the final max |gradient|)."""

    def __init__(self, coef: np.ndarray, intercept: np.ndarray, iterations: int, grad_max: float):
        self.coef, self.intercept = coef, intercept
        self.iterations, self.grad_max = iterations, grad_max

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Decision values ``(N, K)`` for ``x`` ``(N, D)`` (binomial: ``[0, z]``)."""
        z = np.asarray(x, dtype=np.float64) @ self.coef + self.intercept
        return np.concatenate([np.zeros_like(z), z], axis=1) if z.shape[1] == 1 else z

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class codes ``(N,)``: the first class of highest logit."""
        return self.logits(x).argmax(axis=1)


def standardize(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(N, D)`` and ``(M, D)`` scaled by the train mean and population standard deviation
    (statistics in float64), returned as float32; a constant feature keeps scale 1, as
    ``sklearn.preprocessing.StandardScaler``."""
    x = np.asarray(x_train, dtype=np.float32)
    n, eps = len(x), np.finfo(np.float64).eps
    mean = x.mean(axis=0, dtype=np.float64)
    # Two-pass variance in row blocks: no float64 copy of the whole matrix.
    var = np.zeros_like(mean)
    for start in range(0, n, BLOCK):
        dev = x[start : start + BLOCK].astype(np.float64) - mean
        var += np.einsum("ij,ij->j", dev, dev)
    var /= max(n, 1)
    # A constant column's variance is rounding residue of the mean; StandardScaler treats
    # a variance within that bound as zero rather than blowing the residue up to O(1).
    std = np.sqrt(var)
    std[var <= n * eps * var + (n * mean * eps) ** 2] = 1.0
    scale = (1.0 / std).astype(np.float32)
    shift = mean.astype(np.float32)
    train = np.subtract(x, shift)
    train *= scale
    test = np.subtract(np.asarray(x_test, dtype=np.float32), shift)
    test *= scale
    return train, test


def _gram(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition ``(lam (D,), Q (D, D))`` of ``X^T X / N`` estimated on an evenly
    spaced sample of at most ``_SAMPLE_ROWS`` rows of ``x`` ``(N, D)``."""
    step = max(1, len(x) // _SAMPLE_ROWS)
    sample = x[::step]
    lam, q = np.linalg.eigh((sample.T @ sample).astype(np.float64) / len(sample))
    return np.clip(lam, 0.0, None), q


def _class_curvature(codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition ``(mu (M,), R (M, M))`` of the loss curvature over the logits at
    the class frequencies ``p``: ``diag(p) - p p^T`` (binomial: ``p1 (1 - p1)``)."""
    p = np.bincount(codes, minlength=k) / len(codes)
    if k == 2:
        return np.array([p[1] * p[0]]), np.ones((1, 1))
    mu, r = np.linalg.eigh(np.diag(p) - np.outer(p, p))
    return np.clip(mu, 0.0, None), r


def _block_sums(
    x: np.ndarray, codes: np.ndarray, wpad: np.ndarray, b: np.ndarray, k: int
) -> tuple[float, np.ndarray, np.ndarray]:
    """The loss summed over rows ``x`` ``(B, D)`` of class ``codes`` ``(B,)``, ``R^T x``
    ``(P, D)`` and ``R`` summed over rows ``(P,)``, float64, for the residual ``R`` = softmax -
    one-hot. ``wpad`` ``(D, P)`` float32 holds the ``M`` weight columns as columns ``k - M ..
    k`` (binomial: class 0's logit is 0) and zeros elsewhere; ``b`` ``(M,)`` float32."""
    o = k - len(b)
    rows = np.arange(len(x))
    # Logits transposed, (P, B): the per-row softmax becomes elementwise work on k rows.
    z = np.ascontiguousarray((x @ wpad).T)
    zk = z[:k]
    zk[o:] += b[:, None]
    picked = zk[codes, rows].sum(dtype=np.float64)
    top = zk.max(axis=0)
    zk -= top
    np.exp(zk, out=zk)
    total = zk.sum(axis=0, dtype=np.float64)
    loss = np.log(total).sum() + top.sum(dtype=np.float64) - picked
    zk *= (1.0 / total).astype(z.dtype)
    zk[codes, rows] -= 1.0
    z[:o] = 0.0  # the binomial's class 0 has no parameters
    return float(loss), (z @ x).astype(np.float64), z.sum(axis=1, dtype=np.float64)


def _block_probabilities(x: np.ndarray, wpad: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """Class probabilities ``(B, k)`` float32 of rows ``x`` ``(B, D)``; ``wpad``, ``b`` as for
    :func:`_block_sums`."""
    z = x @ wpad[:, :k]
    z[:, k - len(b) :] += b
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _class_block(x: np.ndarray, weight: np.ndarray, n: int, reg: float) -> np.ndarray:
    """Lower Cholesky factor ``(D+1, D+1)`` of ``sum_i t_i [x_i 1]^T [x_i 1] / n`` plus ``reg``
    on the weights, over the rows of ``x`` ``(N, D)`` whose weight ``t`` ``(N,)`` is at least
    :data:`_CURVATURE_CUT` of the largest."""
    from scipy.linalg import cholesky

    d = x.shape[1]
    rows = np.flatnonzero(weight >= _CURVATURE_CUT * weight.max())
    xs, t = x[rows], weight[rows]
    h = np.empty((d + 1, d + 1))
    h[:d, :d] = xs.T @ (xs * t[:, None].astype(np.float32))
    h[d, :d] = h[:d, d] = t.astype(np.float32) @ xs
    h[d, d] = t.sum()
    h /= n
    h[np.diag_indices(d)] += reg
    # The intercept is not penalised: a class without curvature left would make h singular.
    h[np.diag_indices(d + 1)] += 1e-12 * (1.0 + np.trace(h) / (d + 1))
    return cholesky(h, lower=True)


class _Coordinates:
    """Coordinates in which the approximate Hessian ``G (x) A + reg`` of the weights is the
    identity: ``W = Q (scale * V) R^T``, ``b = R (bscale * c)``, from ``G = Q diag(lam) Q^T``
    ``(D, D)`` (feature curvature) and ``A = R diag(mu) R^T`` ``(M, M)`` (logit curvature)."""

    def __init__(self, lam: np.ndarray, q: np.ndarray, mu: np.ndarray, r: np.ndarray, reg: float):
        lam, mu = np.clip(lam, 0.0, None), np.clip(mu, 0.0, None)
        self.q, self.r = q, r
        self.scale = 1.0 / np.sqrt(np.outer(lam, mu) + reg)
        # The intercept's curvature is mu (features are centred); along a direction where it
        # is 0 (all logits shifted alike) the gradient is 0 too, so any finite scale will do.
        self.bscale = 1.0 / np.sqrt(np.where(mu > 1e-12, mu, 1.0))

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(W (D, M), b (M,))`` from coordinates ``theta``."""
        d, m = self.scale.shape
        return self.q @ (self.scale * theta[: d * m].reshape(d, m)) @ self.r.T, self.r @ (
            self.bscale * theta[d * m :]
        )

    def pack(self, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`unpack`."""
        v = (self.q.T @ w @ self.r) / self.scale
        return np.concatenate([v.ravel(), (self.r.T @ b) / self.bscale])

    def gradient(self, gw: np.ndarray, gb: np.ndarray) -> np.ndarray:
        """The gradient in coordinates, from ``gw (D, M)`` and ``gb (M,)``."""
        gv = self.scale * (self.q.T @ gw @ self.r)
        return np.concatenate([gv.ravel(), self.bscale * (self.r.T @ gb)])


class _ClassBlocks:
    """Coordinates from a block-diagonal Hessian over reference-class logits (module docstring,
    stage 2): ``u_j = [w_j; b_j] - [w_ref; b_ref]`` ``(D+1,)`` for each class ``j`` in ``free``,
    scaled by ``L_j^T`` (``chol``). Multinomial: every class but ``ref``, and ``(W, b)`` come
    back with zero sum over classes, as the optimum has; binomial (``ref`` None): the one
    column as it is."""

    def __init__(self, chol: list[np.ndarray], free: np.ndarray, ref: int | None, k: int):
        self.chol, self.free, self.ref, self.k = chol, free, ref, k

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from scipy.linalg import solve_triangular

        th = theta.reshape(len(self.chol), -1)
        u = np.stack(
            [
                solve_triangular(c, t, lower=True, trans="T")
                for c, t in zip(self.chol, th, strict=True)
            ]
        )
        if self.ref is not None:
            full = np.zeros((self.k, u.shape[1]))
            full[self.free] = u
            u = full - full.mean(axis=0)
        return u[:, :-1].T, u[:, -1]

    def pack(self, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        u = np.concatenate([w.T, b[:, None]], axis=1)
        if self.ref is not None:
            u = u[self.free] - u[self.ref]
        return np.concatenate([c.T @ v for c, v in zip(self.chol, u, strict=True)])

    def gradient(self, gw: np.ndarray, gb: np.ndarray) -> np.ndarray:
        from scipy.linalg import solve_triangular

        g = np.concatenate([gw.T, gb[:, None]], axis=1)
        if self.ref is not None:  # through the zero-sum map: d/du_j = g_j - mean of g
            g = g[self.free] - g.mean(axis=0)
        return np.concatenate(
            [solve_triangular(c, v, lower=True) for c, v in zip(self.chol, g, strict=True)]
        )


def fit(
    x: np.ndarray,
    codes: np.ndarray,
    k: int,
    c: float = C,
    tol: float = TOL,
    init: Fit | None = None,
    threads: int | None = None,
) -> Fit:
    """Minimise the objective (module docstring) for ``x`` ``(N, D)`` (float32, standardised)
    and ``codes`` ``(N,)`` in ``[0, k)``, ``k >= 2``; ``init`` warm-starts from a fit of the
    same shape. Stops when max |gradient| <= ``tol``, when float64 evaluations can no longer
    lower the objective, or after :data:`MAX_ITER` iterations. ``threads`` (default: the CPUs
    this process may use) changes the speed, not the result."""
    from scipy.optimize import minimize
    from threadpoolctl import threadpool_limits

    x32 = np.ascontiguousarray(x, dtype=np.float32)
    codes = np.asarray(codes, dtype=np.intp)
    n, d = x32.shape
    m = 1 if k == 2 else k
    reg = 1.0 / (c * n)
    # First the Hessian at the class frequencies, approximated as (X^T X / N) (x) (class
    # curvature); W = 0 and the logits at the log frequencies is where it is exact.
    coords = _Coordinates(*_gram(x32), *_class_curvature(codes, k), reg)
    blocks = [slice(s, s + BLOCK) for s in range(0, n, BLOCK)]
    width = -(-k // _PAD) * _PAD
    # The precision of the evaluations: float32 until its rounding stalls L-BFGS, then
    # float64 (each block cast as it is read: no float64 copy of the whole matrix).
    at = {"dtype": np.float32}
    last: dict[str, object] = {}

    def value_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        dtype = at["dtype"]
        w, b = coords.unpack(theta)
        wpad = np.zeros((d, width), dtype)
        wpad[:, k - m : k] = w
        bs = b.astype(dtype)
        parts = run(
            lambda rows: _block_sums(x32[rows].astype(dtype, copy=False), codes[rows], wpad, bs, k),
            blocks,
        )
        loss, gz, gb = 0.0, np.zeros(wpad.shape[::-1]), np.zeros(wpad.shape[1])
        for part in parts:  # in block order, whichever thread summed each block
            loss += part[0]
            gz += part[1]
            gb += part[2]
        loss = loss / n + 0.5 * reg * float((w * w).sum())
        gw = gz[k - m : k].T / n + reg * w
        gb = gb[k - m : k] / n
        last["theta"], last["grad_max"] = theta, max(np.abs(gw).max(), np.abs(gb).max())
        return loss, coords.gradient(gw, gb)

    def class_blocks(w: np.ndarray, b: np.ndarray) -> _ClassBlocks:
        # float32 is plenty for a preconditioner: it sets the speed, not the optimum.
        wpad = np.zeros((d, width), np.float32)
        wpad[:, k - m : k] = w
        b32 = b.astype(np.float32)
        p = np.concatenate(
            list(run(lambda rows: _block_probabilities(x32[rows], wpad, b32, k), blocks))
        )
        ref = None if m == 1 else int(np.bincount(codes, minlength=k).argmax())
        free = np.array([1]) if m == 1 else np.delete(np.arange(k), ref)
        # p_j (1 - p_j): the curvature of logit j against the reference (binomial: p0 p1).
        chol = list(run(lambda j: _class_block(x32, p[:, j] * (1 - p[:, j]), n, reg), free))
        return _ClassBlocks(chol, free, ref, k)

    def done(intermediate_result) -> None:
        # Stop on the gradient in the problem's own coordinates (sklearn's scale), not the
        # preconditioned one that L-BFGS-B's gtol would test.
        if np.array_equal(last["theta"], intermediate_result.x) and last["grad_max"] <= tol:
            raise StopIteration

    if init is None:
        logp = np.log(np.maximum(np.bincount(codes, minlength=k), 1) / n)
        b0 = logp[1:] - logp[0] if k == 2 else logp - logp.mean()
        w, b = np.zeros((d, m)), b0
    else:
        w, b = init.coef, init.intercept
    theta = coords.pack(w, b)
    workers = min(threads or available_cpus(), len(blocks))
    # Stage 2 only where its blocks fit in memory (wide features of many classes do not).
    staged = (k - 1) * (d + 1) ** 2 <= _MAX_BLOCKS
    stage, iterations = 1, 0
    # One BLAS thread per block: the parallelism is over blocks, which keeps each product's
    # summation order, hence the result, independent of the thread count.
    with threadpool_limits(1), ThreadPoolExecutor(workers) as pool:
        run = pool.map if workers > 1 else map
        while iterations < MAX_ITER:
            exact = at["dtype"] == np.float64
            limit = REFRESH_AT if stage == 1 and staged else MAX_ITER - iterations
            res = minimize(
                value_and_grad, theta, jac=True, method="L-BFGS-B", callback=done,
                options={"maxiter": limit, "maxfun": 2 * MAX_ITER, "gtol": 0.0, "ftol": 0.0,
                         "maxcor": 20, "maxls": 20 if exact else _MAX_LINE_SEARCH},
            )  # fmt: skip
            iterations += int(res.nit)
            if not np.array_equal(last["theta"], res.x):
                value_and_grad(res.x)
            w, b = coords.unpack(res.x)
            stalled = res.nit < limit  # the line search found no lower value
            if last["grad_max"] <= tol or (stalled and exact):
                break
            if stage == 1 and staged:
                coords = class_blocks(w, b)
            else:
                # Where float32 rounding of the loss swamps the decrease left to find, the
                # optimum is within reach of float64 only. Which point that is depends on
                # the CPU's float32 kernels (tests/test_compare_probes.py, the fixtures).
                # The preconditioner stays: it was built near here.
                at["dtype"] = np.float64
            stage += 1
            theta = coords.pack(w, b)
    return Fit(w, b, iterations, float(last["grad_max"]))
