"""Every example of the founding documents (shared/seeds), reproduced exactly.

The seed functions are copied here as the reference: poolkit must give the same
numbers for one unpadded text, and the same numbers again inside a padded batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poolkit import sequence_embedding, span_embeddings, token_embeddings


def seed_sequence(encoder_output, pooling="cls"):
    if pooling == "cls":
        return encoder_output[0]
    if pooling == "mean":
        return np.mean(encoder_output, axis=0)
    if pooling == "max":
        return np.max(encoder_output, axis=0)
    raise ValueError(pooling)


def seed_span(encoder_output, start, end, method="endpoints"):
    span_tokens = encoder_output[start : end + 1]
    if method == "endpoints":
        return np.concatenate([span_tokens[0], span_tokens[-1]])
    if method == "mean":
        return np.mean(span_tokens, axis=0)
    if method == "maxpool":
        return np.max(span_tokens, axis=0)
    raise ValueError(method)


@pytest.fixture
def output() -> np.ndarray:
    """The seed's encoder output: 8 tokens ([CLS] John works at Google ... [SEP]), d=256."""
    return np.random.default_rng(42).standard_normal((8, 256)).astype(np.float32)


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_sequence_level(output, pooling):
    np.testing.assert_allclose(
        sequence_embedding(output, None, pooling), seed_sequence(output, pooling), rtol=1e-6
    )
    # the same text inside a right- and a left-padded batch
    batch = np.zeros((2, 11, 256), np.float32)
    batch[0, :8], batch[1, 3:] = output, output
    mask = np.zeros((2, 11), np.int64)
    mask[0, :8], mask[1, 3:] = 1, 1
    got = sequence_embedding(torch.from_numpy(batch), torch.from_numpy(mask), pooling).numpy()
    np.testing.assert_allclose(
        got, np.stack([seed_sequence(output, pooling)] * 2), rtol=1e-6, atol=1e-6
    )


def test_token_level(output):
    special = np.zeros(8, dtype=bool)
    special[0] = special[-1] = True
    content = token_embeddings(output, special)
    assert output.shape == (8, 256)
    assert content.shape == (6, 256)
    np.testing.assert_array_equal(content, output[~special])


@pytest.mark.parametrize(
    ("method", "strategy", "dim"),
    [("endpoints", "endpoints", 512), ("mean", "mean", 256), ("maxpool", "max", 256)],
)
def test_span_level(output, method, strategy, dim):
    got = span_embeddings(output, np.array([[3, 4]]), strategy)[0]
    assert got.shape == (dim,)
    np.testing.assert_allclose(got, seed_span(output, 3, 4, method), rtol=1e-6)
