"""Scores for `poolkit compare`. Every score is a fraction (correlations in [-1, 1])."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "accuracy",
    "bio_entities",
    "cosine_rows",
    "entity_f1",
    "macro_f1",
    "pearson",
    "spearman",
    "token_accuracy",
]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows of ``a`` and ``b`` (both ``(N, D)``) -> float64 ``(N,)``.

    A zero row has similarity 0 with anything (not NaN).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("nd,nd->n", a, b)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Pearson correlation of two ``(N,)`` vectors; 0.0 when either is constant."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    denom = np.sqrt(np.dot(x, x) * np.dot(y, y))
    return float(np.dot(x, y) / denom) if denom > 0 else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank (as Spearman's rho requires)."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # Start of each run of equal values, then the average rank of that run.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation of two ``(N,)`` vectors (ties averaged); 0.0 if constant."""
    return pearson(_ranks(np.asarray(x, dtype=np.float64)), _ranks(np.asarray(y, np.float64)))


def accuracy(gold: Sequence, pred: Sequence) -> float:
    """Fraction of positions where ``pred`` equals ``gold`` (both length N, N > 0)."""
    gold_a, pred_a = np.asarray(gold), np.asarray(pred)
    return float(np.mean(gold_a == pred_a))


def macro_f1(gold: Sequence, pred: Sequence) -> float:
    """Unweighted mean over the gold labels' classes of per-class F1.

    Classes are the union of gold and predicted labels; a class never predicted and
    never gold does not exist; F1 is 0 for a class with no true positive.
    """
    gold_a, pred_a = np.asarray(gold), np.asarray(pred)
    scores = []
    for c in np.union1d(gold_a, pred_a):
        tp = np.sum((gold_a == c) & (pred_a == c))
        fp = np.sum((gold_a != c) & (pred_a == c))
        fn = np.sum((gold_a == c) & (pred_a != c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def bio_entities(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """Entities of one sentence's BIO/IOB tags as ``(start, end, type)``, ``end`` inclusive.

    CoNLL convention (conlleval): an entity begins at ``B-X``, or at ``I-X`` that does not
    continue an entity of type ``X`` (IOB1 and broken BIO); it ends before ``O``, ``B-*`` or
    an ``I-Y`` of another type.
    """
    out: set[tuple[int, int, str]] = set()
    start, kind = -1, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, typ = tag.partition("-")
        continues = prefix == "I" and start >= 0 and typ == kind
        if start >= 0 and not continues:
            out.add((start, i - 1, kind))
            start, kind = -1, ""
        if prefix in ("B", "I") and not continues:
            start, kind = i, typ
    return out


def entity_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """Entity-level micro F1 over sentences: exact span and type match (CoNLL).

    ``gold[i]`` and ``pred[i]`` are the tags of sentence i (same length). F1 =
    2 * matches / (gold entities + predicted entities); 0.0 when nothing matches.
    """
    tp = n_gold = n_pred = 0
    for g, p in zip(gold, pred, strict=True):
        g_set, p_set = bio_entities(g), bio_entities(p)
        tp += len(g_set & p_set)
        n_gold += len(g_set)
        n_pred += len(p_set)
    return 2 * tp / (n_gold + n_pred) if tp else 0.0


def token_accuracy(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """Fraction of tokens whose predicted tag equals the gold tag, over all sentences."""
    flat_g = [t for s in gold for t in s]
    flat_p = [t for s in pred for t in s]
    return accuracy(flat_g, flat_p)
