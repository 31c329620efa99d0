"""Per-task evaluations: what one row keeps after scoring (similarities, predictions,
per-query results), so that its metrics can be computed on the data (:mod:`.metrics`) and
on bootstrap resamples (:class:`poolkit.compare.bootstrap.Evaluation`) without the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from poolkit.compare import bootstrap as bs
from poolkit.compare import metrics

__all__ = ["ClusterEval", "LabelEval", "PairEval", "QueryEval", "TagEval"]


class _Units:
    """``units``: the length of the first field (one entry per unit)."""

    @property
    def units(self) -> int:
        return len(getattr(self, fields(self)[0].name))  # type: ignore[arg-type]


@dataclass(frozen=True)
class PairEval(_Units):
    """``sts``: cosine similarity ``cos`` ``(N,)`` and gold ``scores`` ``(N,)``; unit: pair.
    Metrics: Spearman, Pearson."""

    cos: np.ndarray
    scores: np.ndarray

    def point(self) -> tuple[float, ...]:
        return metrics.spearman(self.cos, self.scores), metrics.pearson(self.cos, self.scores)

    @cached_property
    def _plan(self) -> bs.RankPlan:
        return bs.rank_plan(self.cos)

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        gold_ranks = _ranks_of(self.scores, counts)
        return np.stack(
            [
                bs.weighted_spearman(self.cos, self.scores, counts, self._plan, gold_ranks),
                bs.weighted_pearson(self.cos, self.scores, counts),
            ],
            axis=1,
        )


_last_ranks: list = [None, None, None]  # (values, counts, ranks) of the latest call


def _ranks_of(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """:func:`~poolkit.compare.bootstrap.weighted_ranks`, remembered for the latest
    (values, counts) pair: every row of a comparison shares the gold scores and the block."""
    if _last_ranks[0] is not values or _last_ranks[1] is not counts:
        _last_ranks[:] = [values, counts, bs.weighted_ranks(values, counts)]
    return _last_ranks[2]


@dataclass(frozen=True)
class LabelEval(_Units):
    """``classification``/``relation``: gold and predicted labels ``(N,)``; unit: example.
    Metrics: accuracy, macro-F1 (``main_first``) or macro-F1, accuracy."""

    gold: np.ndarray
    pred: np.ndarray
    main_first: bool = True

    def point(self) -> tuple[float, ...]:
        acc, f1 = metrics.accuracy(self.gold, self.pred), metrics.macro_f1(self.gold, self.pred)
        return (acc, f1) if self.main_first else (f1, acc)

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        acc = bs.weighted_mean((self.gold == self.pred).astype(np.float64), counts)
        f1 = bs.weighted_macro_f1(self.gold, self.pred, counts)
        return np.stack([acc, f1] if self.main_first else [f1, acc], axis=1)


@dataclass(frozen=True)
class TagEval(_Units):
    """``ner``: gold and predicted tags per sentence; unit: sentence.
    Metrics: entity-level micro F1, token accuracy."""

    gold: Sequence[Sequence[str]]
    pred: Sequence[Sequence[str]]

    def point(self) -> tuple[float, ...]:
        return metrics.entity_f1(self.gold, self.pred), metrics.token_accuracy(self.gold, self.pred)

    @cached_property
    def _counts(self) -> np.ndarray:
        """Per sentence ``(N, 5)``: matched, gold and predicted entities, right tags, tags."""
        out = np.zeros((self.units, 5))
        for i, (g, p) in enumerate(zip(self.gold, self.pred, strict=True)):
            ge, pe = metrics.bio_entities(g), metrics.bio_entities(p)
            right = sum(a == b for a, b in zip(g, p, strict=True))
            out[i] = len(ge & pe), len(ge), len(pe), right, len(g)
        return out

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        tp, n_gold, n_pred, right, size = self._counts.T
        f1 = bs.weighted_f1_counts(tp, n_gold, n_pred, counts)
        return np.stack([f1, (counts @ right) / (counts @ size)], axis=1)


@dataclass(frozen=True)
class QueryEval(_Units):
    """``retrieval``: per-query metrics ``(Q, M)`` (nDCG@10, MRR@10, Recall@100, MAP@100);
    unit: query. Every metric is the mean over queries."""

    per_query: np.ndarray

    def point(self) -> tuple[float, ...]:
        return tuple(float(v) for v in self.per_query.mean(axis=0))

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        return bs.weighted_mean(self.per_query, counts)


@dataclass(frozen=True)
class ClusterEval(_Units):
    """``clustering``: gold label codes ``(N,)`` and cluster assignments ``(runs, N)`` of the
    seeded k-means runs; unit: text. Metric: V-measure averaged over the runs."""

    labels: np.ndarray
    clusters: np.ndarray

    def point(self) -> tuple[float, ...]:
        from sklearn.metrics import v_measure_score

        return (float(np.mean([v_measure_score(self.labels, c) for c in self.clusters])),)

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        runs = [bs.weighted_v_measure(self.labels, c, counts) for c in self.clusters]
        return np.mean(runs, axis=0)[:, None]
