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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit.fitted import Fit, FitError, fit_transform, parse_transform

__all__ = ["train_projection", "train_retrieval_projection"]

_SCALE = 20.0  # CoSENT's temperature (the paper's and sentence-transformers' default)


@dataclass
class _Run:
    """One training run's shared parts: ``W`` (float64, from the PCA ``start``), its
    optimiser, the seeded batch order, and the best epoch so far by a held-out score."""

    start: Fit
    seed: int
    lr: float

    def __post_init__(self) -> None:
        import torch

        # float64: small matrices, and the same bits from run to run on one machine
        self.mean = torch.as_tensor(self.start.mean, dtype=torch.float64)
        self.w = torch.nn.Parameter(torch.as_tensor(self.start.matrix, dtype=torch.float64).clone())
        self.opt = torch.optim.Adam([self.w], lr=self.lr)
        self.order = torch.Generator().manual_seed(self.seed)

    def centred(self, x: np.ndarray) -> Any:
        import torch

        return torch.as_tensor(x, dtype=torch.float64) - self.mean

    def fit(self, rows: Any, epochs: int, batch: int, loss: Callable[[Any], Any],
            held_out: Callable[[], float]) -> tuple[np.ndarray, float, int]:  # fmt: skip
        """``epochs`` over ``rows`` (a tensor) in seeded batches of ``batch``, each step
        minimising ``loss(batch rows)``; returns the ``W`` of the epoch (0: the start) with the
        best ``held_out()`` score, the score and the epoch."""
        import torch

        with torch.no_grad():
            best, best_epoch = _score(held_out()), 0
        best_w = self.w.detach().clone()
        for epoch in range(1, epochs + 1):
            perm = rows[torch.randperm(len(rows), generator=self.order)]
            for lo in range(0, len(perm), batch):
                value = loss(perm[lo : lo + batch])
                self.opt.zero_grad()
                value.backward()
                self.opt.step()
            with torch.no_grad():
                score = held_out()
            if _score(score) > best:
                best, best_w, best_epoch = score, self.w.detach().clone(), epoch
        return best_w.numpy().astype(np.float32), best, best_epoch


def _score(value: float) -> float:
    """A held-out score to compare, NaN (an undefined correlation) counting as the worst."""
    return float("-inf") if np.isnan(value) else value


def _enough(rows: int, k: int, what: str) -> None:
    """Refuse a ``/projK`` whose PCA start needs more than ``rows`` vectors."""
    if rows < k + 1:
        raise FitError(arg="pairs", expected=f"at least {k + 1} {what} to train /proj{k} (its "
                       f"start is their PCA to {k})", got=f"{rows}",
                       fix="Train on more labelled data, or a smaller K.")  # fmt: skip


def _projection(transform: str) -> tuple[str, int]:
    """``(canonical transform, K)`` of a ``projK`` transform, else refused."""
    kind = parse_transform(transform)
    if kind is None or not kind.startswith("proj"):
        raise FitError(arg="transform", expected="projK, e.g. proj128", got=repr(transform),
                       fix="Train a /projK recipe.")  # fmt: skip
    return kind, int(kind[4:])


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

    kind, k = _projection(transform)
    x, y = np.asarray(a, np.float32), np.asarray(b, np.float32)
    g = np.asarray(gold, np.float64)
    if x.shape != y.shape or x.ndim != 2 or g.shape != (len(x),):
        raise FitError(arg="pairs", expected="two (N, D) arrays and N gold scores",
                       got=f"{x.shape}, {y.shape}, {g.shape}")  # fmt: skip
    if len(x) < 20 or len(np.unique(g)) < 2:
        raise FitError(arg="pairs", expected="at least 20 pairs with two distinct gold scores "
                       "to train on", got=f"{len(x)} pairs, {len(np.unique(g))} distinct scores",
                       fix="Train on a labelled train split (compare --train FILE).")  # fmt: skip
    _enough(2 * len(x), k, "pair sides")
    run = _Run(fit_transform(np.concatenate([x, y]), f"pca{k}", recipe=recipe), seed, lr)
    order = np.random.default_rng(seed).permutation(len(x))
    held = order[: max(len(x) // 10, 10)]
    train = order[len(held) :]
    if len(np.unique(g[held])) < 2:  # a Spearman of one value is undefined: no epoch chosen
        raise FitError(arg="pairs", expected="held-out pairs with two distinct gold scores",
                       got=f"{len(held)} held-out pairs, all {g[held][0]:g}",
                       fix="Train on more pairs, or pairs with more varied scores.")  # fmt: skip
    xa, xb, gt = run.centred(x), run.centred(y), torch.as_tensor(g, dtype=torch.float64)

    def cosine(rows: Any) -> Any:
        return torch.nn.functional.cosine_similarity(xa[rows] @ run.w, xb[rows] @ run.w, dim=1)

    def cosent(rows: Any) -> Any:
        cos = cosine(rows) * _SCALE
        # every two pairs (i, j) with gold_i > gold_j: cos_j - cos_i should be low
        diff = cos[None, :] - cos[:, None]
        ordered = gt[rows][:, None] > gt[rows][None, :]
        return torch.logsumexp(torch.cat([torch.zeros(1, dtype=cos.dtype), diff[ordered]]), 0)

    def held_spearman() -> float:
        return float(spearmanr(cosine(torch.as_tensor(held)).numpy(), g[held]).statistic)

    w, best, epoch = run.fit(torch.as_tensor(train), epochs, batch, cosent, held_spearman)
    extra = {"trained_on": f"{len(train)} pairs ({len(held)} held out)", "loss": "cosent",
             "seed": str(seed), "epochs": str(epochs), "best_epoch": str(epoch),
             "held_out_spearman": f"{best:.6f}"}  # fmt: skip
    return Fit(kind, run.start.mean, w, recipe, model, len(x), source, texts_digest, extra)


def train_retrieval_projection(
    queries: Any,
    documents: Any,
    positives: Any,
    hard: Any,
    transform: str,
    *,
    recipe: str,
    model: str = "",
    source: str = "",
    texts_digest: str = "",
    seed: int = 0,
    epochs: int = 10,
    batch: int = 64,
    lr: float = 1e-4,
    temperature: float = 0.05,
) -> Fit:
    """Train ``transform`` (``projK``) for retrieval: float ``(Q, D)`` train ``queries``,
    the corpus' ``(N, D)`` ``documents``, ``positives`` int ``(P, 2)`` rows ``(query,
    document)`` judged relevant, and ``hard`` ``(Q,)`` one hard negative per query (the
    base row's best-ranked document not judged relevant; -1: none). The loss is InfoNCE
    (cross-entropy of each pair's cosine at ``temperature`` against the batch's other
    positives and every hard negative in the batch); ``W`` starts as the documents' PCA to
    ``K``; a tenth of the train queries is held out and the epoch with the best mean
    reciprocal rank of their positives (over the whole corpus) kept. Seeded."""
    import torch

    kind, k = _projection(transform)
    q = np.asarray(queries, np.float32)
    d = np.asarray(documents, np.float32)
    pos = np.asarray(positives, np.int64).reshape(-1, 2)
    neg = torch.as_tensor(np.asarray(hard, np.int64))
    owners = np.unique(pos[:, 0])
    if len(owners) < 20:
        raise FitError(arg="pairs", expected="at least 20 train queries with a relevant "
                       "document", got=f"{len(owners)}", fix="Train on a larger qrels split.")  # fmt: skip
    _enough(len(d), k, "documents")
    run = _Run(fit_transform(d, f"pca{k}", recipe=recipe), seed, lr)
    held_q = np.random.default_rng(seed).permutation(owners)[: max(len(owners) // 10, 5)]
    in_held = np.isin(pos[:, 0], held_q)
    train_pos, held_pos = pos[~in_held], pos[in_held]
    tq, td = run.centred(q), run.centred(d)

    def unit(x: Any) -> Any:
        return torch.nn.functional.normalize(x @ run.w, dim=1)

    def infonce(part: Any) -> Any:
        negs = neg[part[:, 0]]
        negs = negs[negs >= 0]
        cand = torch.cat([part[:, 1], negs])  # the batch's positives, then hard negatives
        logits = unit(tq[part[:, 0]]) @ unit(td[cand]).T / temperature
        # another positive of the same query is no negative: masked out
        same = part[:, 0][:, None] == part[:, 0][None, :]
        same &= ~torch.eye(len(part), dtype=torch.bool)
        mask = torch.cat([same, torch.zeros(len(part), len(negs), dtype=torch.bool)], dim=1)
        logits = logits.masked_fill(mask, float("-inf"))
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(part)))

    def held_mrr() -> float:
        scores = unit(tq[held_pos[:, 0]]) @ unit(td).T
        own = scores[torch.arange(len(held_pos)), held_pos[:, 1]]
        return float((1.0 / ((scores > own[:, None]).sum(dim=1) + 1)).mean())

    w, best, epoch = run.fit(torch.as_tensor(train_pos), epochs, batch, infonce, held_mrr)
    extra = {"trained_on": f"{len(train_pos)} judged pairs of {len(owners) - len(held_q)} "
             f"queries ({len(held_q)} held out)", "loss": "infonce", "seed": str(seed),
             "epochs": str(epochs), "best_epoch": str(epoch), "held_out_mrr": f"{best:.6f}",
             "temperature": f"{temperature:g}"}  # fmt: skip
    return Fit(kind, run.start.mean, w, recipe, model, len(q), source, texts_digest, extra)
