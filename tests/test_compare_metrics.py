"""Metrics of `poolkit compare` against hand-worked examples and independent references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from metric_reference import chunks_by_scanning, entity_f1_reference
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score
from testdata import fixture

from poolkit.compare.datasets import read_task
from poolkit.compare.metrics import (
    accuracy,
    bio_entities,
    cosine_rows,
    entity_f1,
    macro_f1,
    pearson,
    spearman,
    token_accuracy,
)


def test_correlations_match_scipy_with_ties():
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 6, 300).astype(float)  # many ties, like STS-B's scores
    pred = gold + rng.normal(size=300)
    assert spearman(pred, gold) == pytest.approx(stats.spearmanr(pred, gold).statistic, abs=1e-12)
    assert pearson(pred, gold) == pytest.approx(stats.pearsonr(pred, gold).statistic, abs=1e-12)


def test_correlations_of_a_constant_are_zero_not_nan():
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0
    assert pearson([1, 2, 3], [5, 5, 5]) == 0.0


def test_cosine_rows_hand_worked_and_zero_row():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    b = np.array([[0.0, 2.0], [2.0, 2.0], [1.0, 1.0]])
    np.testing.assert_allclose(cosine_rows(a, b), [0.0, 1.0, 0.0])


def test_accuracy_and_macro_f1_match_sklearn():
    rng = np.random.default_rng(1)
    gold = rng.choice(["a", "b", "c", "d"], 200)
    pred = np.where(rng.random(200) < 0.6, gold, rng.choice(["a", "b", "c", "e"], 200))
    assert accuracy(gold, pred) == pytest.approx(accuracy_score(gold, pred))
    assert macro_f1(gold, pred) == pytest.approx(f1_score(gold, pred, average="macro"))


def test_bio_entities_conll_convention():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "B-PER", "B-PER"]
    # I-LOC after O starts an entity (IOB1); B-LOC starts a new one; I-ORG after B-LOC
    # starts an ORG; two B-PER in a row are two entities.
    assert bio_entities(tags) == {
        (0, 1, "PER"),
        (3, 4, "LOC"),
        (5, 5, "LOC"),
        (6, 6, "ORG"),
        (7, 7, "PER"),
        (8, 8, "PER"),
    }


def test_entity_f1_hand_worked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "O", "O"]]
    # gold entities: PER(0-1), LOC(3), ORG(1-2); predicted: PER(0-1), ORG(3), ORG(1).
    # One exact match out of 3 gold and 3 predicted: P = R = 1/3, F1 = 1/3.
    assert entity_f1(gold, pred) == pytest.approx(1 / 3)
    assert token_accuracy(gold, pred) == pytest.approx(6 / 8)
    assert entity_f1(gold, gold) == 1.0
    assert entity_f1([["O", "O"]], [["O", "O"]]) == 0.0


def test_entity_f1_matches_independent_reference_on_all_short_tag_sequences():
    alphabet = ["O", "B-A", "I-A", "B-B", "I-B"]
    for seq in itertools.product(alphabet, repeat=4):
        assert bio_entities(list(seq)) == chunks_by_scanning(list(seq)), seq


def test_entity_f1_matches_independent_reference_on_wnut_dev_with_noise():
    data = read_task("ner", fixture("wnut17-dev-sample.conll"))
    tags = sorted({t for s in data.tags for t in s})
    rng = np.random.default_rng(2)
    pred = [[t if rng.random() < 0.8 else rng.choice(tags) for t in s] for s in data.tags]
    assert entity_f1(data.tags, pred) == pytest.approx(
        entity_f1_reference(data.tags, pred), abs=1e-12
    )
    assert token_accuracy(data.tags, pred) == pytest.approx(
        np.mean(
            [
                a == b
                for s, q in zip(data.tags, pred, strict=True)
                for a, b in zip(s, q, strict=True)
            ]
        )
    )
