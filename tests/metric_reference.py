"""Independent references for `poolkit compare` metrics, shared by the metric and CLI
tests."""

from __future__ import annotations

import numpy as np


def chunks_by_scanning(tags: list[str]) -> set[tuple[int, int, str]]:
    """Independent reference: conlleval's start/end-of-chunk rules, written as in conlleval."""
    found, start = set(), None
    prev_tag, prev_type = "O", ""
    for i, full in enumerate([*tags, "O"]):
        tag, typ = [*full.split("-", 1), ""][:2] if full != "O" else ("O", "")
        end_chunk = prev_tag in ("B", "I") and (tag in ("O", "B") or typ != prev_type)
        start_chunk = tag == "B" or (tag == "I" and (prev_tag == "O" or typ != prev_type))
        if end_chunk:
            found.add((start, i - 1, prev_type))
        if start_chunk:
            start = i
        prev_tag, prev_type = tag, typ
    return found


def entity_f1_reference(gold: list[list[str]], pred: list[list[str]]) -> float:
    """Micro entity F1 over all sentences from :func:`chunks_by_scanning`'s chunks."""
    g = {(k, *e) for k, s in enumerate(gold) for e in chunks_by_scanning(s)}
    p = {(k, *e) for k, s in enumerate(pred) for e in chunks_by_scanning(s)}
    if not g & p:
        return 0.0  # no entity found right (e.g. a bootstrap resample): F1 is 0
    precision = len(g & p) / len(p)
    recall = len(g & p) / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n, 8)`` float32 unit vectors of four entries +-0.5: every cosine between them is a
    sum of +-0.25 terms, exact in float32 whatever the order of the sum. (A matmul's order
    depends on where a row sits in its block and on the CPU's kernel: equal vectors at two
    places can differ in the last bit, so ties of random vectors are not ties everywhere.)"""
    out = np.zeros((n, 8), np.float32)
    for row in out:
        row[rng.choice(8, 4, replace=False)] = rng.choice([-0.5, 0.5], 4)
    return out
