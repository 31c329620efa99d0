"""How well one candidate reproduces given vectors, row by row, and what differs when not.

Pure NumPy over ``(N, D)`` float arrays: ``target`` (the vectors to explain) and a
candidate's vectors. A row *matches* when ``||target - candidate|| <= tol * max(||target||,
||candidate||)``: relative, so it holds for raw and normalised vectors alike, and exact
enough to tell ``mean`` from ``sum`` (the same direction, another norm). Cosine is reported
beside it: it says how close the directions are when the norms differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Agreement", "RowScores", "differences", "row_scores"]

# Cosine above which two rows point the same way (only their norms or noise differ).
SAME_DIRECTION = 1 - 1e-3
# Median cosine below which the nearest candidate is no pooling of this model at all.
UNRELATED = 0.9


@dataclass(frozen=True)
class RowScores:
    """Per row of ``N``: ``rel`` relative distance, ``cos`` cosine (float64 ``(N,)``)."""

    rel: np.ndarray
    cos: np.ndarray


def row_scores(target: np.ndarray, vectors: np.ndarray, target_norms: np.ndarray) -> RowScores:
    """:class:`RowScores` of ``vectors`` ``(N, D)`` against ``target`` ``(N, D)``, whose row
    norms ``(N,)`` the caller computed once."""
    norms = np.linalg.norm(vectors, axis=1)
    dist = np.linalg.norm(target - vectors, axis=1)
    scale = np.maximum(np.maximum(target_norms, norms), 1e-12)
    dot = np.einsum("ij,ij->i", target, vectors)
    cos = dot / np.maximum(target_norms * norms, 1e-24)
    return RowScores(dist / scale, np.clip(cos, -1.0, 1.0))


@dataclass(frozen=True)
class Agreement:
    """One candidate against the vectors.

    Attributes:
        candidate: the :class:`~poolkit.diagnosis.space.Candidate`.
        rows: rows compared (``N``).
        matched: rows that match to ``tol``.
        cos_min, cos_median: per-row cosine, smallest and median.
        rel_median, rel_max: per-row relative distance, median and largest.
    """

    candidate: Any
    rows: int
    matched: int
    cos_min: float
    cos_median: float
    rel_median: float
    rel_max: float

    @classmethod
    def of(cls, candidate: Any, scores: RowScores, tol: float) -> Agreement:
        return cls(candidate, int(scores.rel.size), int((scores.rel <= tol).sum()),
                   float(scores.cos.min()), float(np.median(scores.cos)),
                   float(np.median(scores.rel)), float(scores.rel.max()))  # fmt: skip

    @property
    def fraction(self) -> float:
        """Share of rows that match."""
        return self.matched / self.rows if self.rows else 0.0

    def to_json(self) -> dict[str, Any]:
        names = ("rows", "matched", "cos_min", "cos_median", "rel_median", "rel_max")
        return {**self.candidate.to_json(), **{k: getattr(self, k) for k in names}}


def differences(
    target: np.ndarray, vectors: np.ndarray, scores: RowScores, tokens: np.ndarray, tol: float
) -> list[str]:
    """What separates ``target`` from the nearest candidate's ``vectors`` (both ``(N, D)``),
    in words, most telling first; ``tokens`` ``(N,)``: each text's token count before
    truncation (specials included).

    Unrelated directions say another model; the same directions with other norms say
    normalisation or scale; only long texts differing says truncation, and the length
    range; a shift shared by every row says a prompt (or a bias after pooling)."""
    out: list[str] = []
    ok = scores.rel <= tol
    cos_median = float(np.median(scores.cos))
    if cos_median < UNRELATED:
        out.append(
            f"directions differ (median cosine {cos_median:.3f}): vectors of another model, "
            "or of a step poolkit does not try"
        )
    same = scores.cos >= SAME_DIRECTION
    if same.mean() >= 0.99 and not ok.all():
        t_norm = np.linalg.norm(target, axis=1)
        v_norm = np.linalg.norm(vectors, axis=1)
        unit_t = bool(np.all(np.abs(t_norm - 1) < 1e-3))
        unit_v = bool(np.all(np.abs(v_norm - 1) < 1e-3))
        ratio = t_norm / np.maximum(v_norm, 1e-12)
        if unit_t and not unit_v:
            out.append("the vectors are normalised (unit norms) where this candidate is not")
        elif unit_v and not unit_t:
            out.append("the vectors are not normalised (norms "
                       f"{t_norm.min():.3g}..{t_norm.max():.3g})")  # fmt: skip
        elif np.std(ratio) <= 1e-3 * max(float(np.mean(ratio)), 1e-12):
            out.append(f"the vectors are this candidate scaled by {float(np.mean(ratio)):.4g}")
        else:
            out.append(
                "same directions, numerical differences up to "
                f"{float(scores.rel.max()):.2g} (relative): another runtime, precision or "
                "quantisation?"
            )
    if ok.any() and not ok.all():
        short, long = int(tokens[ok].max()), int(tokens[~ok].min())
        if short < long:
            out.append(
                f"only texts longer than {short} tokens differ ({int((~ok).sum())} rows, the "
                f"shortest {long} tokens): truncated at {short} to {long - 1} tokens"
            )
    delta = _unit(target) - _unit(vectors)
    total = float((delta * delta).sum())
    if total > 0 and cos_median >= 0.5 and not ok.all():
        offset = delta.mean(axis=0)
        rest = float(((delta - offset) ** 2).sum())
        explained = 1 - rest / total
        if explained >= 0.5:
            out.append(
                f"a shift common to every row explains {100 * explained:.0f}% of the "
                "difference: a prompt or prefix before each text (pass it as a prompt), or a "
                "bias added after pooling"
            )
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
