"""Trained transforms: a linear projection ``/projK`` learned on labelled pairs.

``mean/proj128`` maps each pooled vector ``x`` (``(D,)``, the encoder frozen) to
``(x - mean) @ W`` (``(K,)``), ``W`` trained so that the cosine of a pair's projected vectors
follows its gold similarity: the CoSENT loss (Su 2022; sentence-transformers' ``CoSENTLoss``)
over every two pairs of a batch, ``log(1 + sum exp(20 (cos_j - cos_i)))`` for the pairs
``(i, j)`` with ``gold_i > gold_j``. ``W`` starts as the pairs' PCA to ``K`` dimensions; the
last tenth of the pairs (after a seeded shuffle) is held out, and the epoch whose projection
ranks the held-out pairs best (Spearman) is kept. Everything is seeded: the same vectors and
seed give the same ``W``, bit for bit, on one machine.

The result is a :class:`~poolkit.fitted.Fit`: saved, shipped and applied as a fitted
transform is (``embed --fit``, Ray, ``export`` as a ``Dense`` module).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolkit.fitted import Fit, FitError, fit_transform, parse_transform

__all__ = ["train_projection"]

_SCALE = 20.0  # CoSENT's temperature (the paper's and sentence-transformers' default)


def train_projection(
    a: Any,
    b: Any,
    gold: Any,
    transform: str,
    *,
    recipe: str,
    model: str = "",
    source: str = "",
    texts_digest: str = "",
    seed: int = 0,
    epochs: int = 10,
    batch: int = 128,
    lr: float = 1e-4,
) -> Fit:
    """Train ``transform`` (``projK``) on pairs: float ``(N, D)`` vectors ``a`` and ``b``
    (the recipe's vectors before its output stage, pair ``i`` = ``a[i]``, ``b[i]``) and their
    gold similarities ``gold`` ``(N,)``; see the module docstring. At least 20 pairs with
    two distinct gold values."""
    import torch
    from scipy.stats import spearmanr

    kind = parse_transform(transform)
    if kind is None or not kind.startswith("proj"):
        raise FitError(arg="transform", expected="projK, e.g. proj128", got=repr(transform),
                       fix="Train a /projK recipe.")  # fmt: skip
    x, y = np.asarray(a, np.float32), np.asarray(b, np.float32)
    g = np.asarray(gold, np.float64)
    if x.shape != y.shape or x.ndim != 2 or g.shape != (len(x),):
        raise FitError(arg="pairs", expected="two (N, D) arrays and N gold scores",
                       got=f"{x.shape}, {y.shape}, {g.shape}")  # fmt: skip
    if len(x) < 20 or len(np.unique(g)) < 2:
        raise FitError(arg="pairs", expected="at least 20 pairs with two distinct gold scores "
                       "to train on", got=f"{len(x)} pairs, {len(np.unique(g))} distinct scores",
                       fix="Train on a labelled train split (compare --train FILE).")  # fmt: skip
    k = int(kind[4:])
    start = fit_transform(np.concatenate([x, y]), f"pca{k}", recipe=recipe)  # PCA: the start
    order = np.random.default_rng(seed).permutation(len(x))
    held = order[: max(len(x) // 10, 10)]
    train = order[len(held) :]
    torch.manual_seed(seed)
    dtype = torch.float64  # small matrices: float64 keeps the run deterministic and exact enough
    mean = torch.as_tensor(start.mean, dtype=dtype)
    w = torch.nn.Parameter(torch.as_tensor(start.matrix, dtype=dtype).clone())
    xa, xb = (torch.as_tensor(v, dtype=dtype) - mean for v in (x, y))
    gt = torch.as_tensor(g, dtype=dtype)
    opt = torch.optim.Adam([w], lr=lr)
    shuffle = torch.Generator().manual_seed(seed)

    def cosine(rows: Any) -> Any:
        pa, pb = xa[rows] @ w, xb[rows] @ w
        return torch.nn.functional.cosine_similarity(pa, pb, dim=1)

    def held_spearman() -> float:
        with torch.no_grad():
            return float(spearmanr(cosine(torch.as_tensor(held)).numpy(), g[held]).statistic)

    best, best_w, best_epoch = held_spearman(), w.detach().clone(), 0
    idx = torch.as_tensor(train)
    for epoch in range(1, epochs + 1):
        perm = idx[torch.randperm(len(idx), generator=shuffle)]
        for lo in range(0, len(perm), batch):
            rows = perm[lo : lo + batch]
            cos = cosine(rows) * _SCALE
            # every two pairs (i, j) with gold_i > gold_j: cos_j - cos_i should be low
            diff = cos[None, :] - cos[:, None]
            ordered = gt[rows][:, None] > gt[rows][None, :]
            loss = torch.logsumexp(torch.cat([torch.zeros(1, dtype=dtype), diff[ordered]]), 0)
            opt.zero_grad()
            loss.backward()
            opt.step()
        score = held_spearman()
        if score > best:
            best, best_w, best_epoch = score, w.detach().clone(), epoch
    extra = {"trained_on": f"{len(train)} pairs ({len(held)} held out)", "loss": "cosent",
             "seed": str(seed), "epochs": str(epochs), "best_epoch": str(best_epoch),
             "held_out_spearman": f"{best:.6f}"}  # fmt: skip
    return Fit(kind, start.mean, best_w.numpy().astype(np.float32), recipe, model, len(x),
               source, texts_digest, extra)  # fmt: skip
