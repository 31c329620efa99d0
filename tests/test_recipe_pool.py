"""``Recipe.pool`` and the ``nn`` modules built from recipes, against plain NumPy references.

The batch is tiny and random: three rows of six tokens (right padding, none, left padding),
four layers, special tokens at each row's first and last real token.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from poolkit import Recipe
from poolkit.nn import Pooler, WordPooler

B, L, H = 3, 6, 4
MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
SPECIAL = np.zeros((B, L), bool)
SPECIAL[[0, 0, 1, 1, 2, 2], [0, 5, 0, 3, 2, 5]] = True
WORD_IDS = np.array([[-1, 0, 0, 1, 2, -1], [-1, 0, 1, -1, -1, -1], [-1, -1, -1, 0, 0, -1]])
# Inclusive token spans; [-1, -1] pads row 1.
SPANS = np.array([[[1, 2], [3, 4]], [[1, 2], [-1, -1]], [[3, 4], [3, 3]]])


@pytest.fixture
def batch() -> SimpleNamespace:
    rng = np.random.default_rng(7)
    layers = tuple(rng.standard_normal((B, L, H)).astype(np.float32) for _ in range(4))
    return SimpleNamespace(
        hidden=layers[-1],
        hidden_states=layers,
        attention_mask=MASK,
        special_tokens_mask=SPECIAL,
        pool_mask=None,
        word_ids=WORD_IDS,
        indices=np.arange(B),
    )


# ---------------------------------------------------------------- NumPy references


def ref_sequence(h: np.ndarray, name: str, drop_special: bool) -> np.ndarray:
    out = []
    for b in range(B):
        real = np.flatnonzero(MASK[b])
        keep = [t for t in real if not (drop_special and SPECIAL[b, t])]
        rows = h[b, keep].astype(np.float64)
        if name == "cls":
            out.append(h[b, real[0]])
        elif name == "mean":
            out.append(rows.mean(0))
        elif name == "max":
            out.append(rows.max(0))
    return np.array(out, np.float64)


def ref_word(h: np.ndarray, name: str, num_words: int) -> np.ndarray:
    out = np.zeros((B, num_words, H * (2 if name == "endpoints" else 1)))
    for b in range(B):
        for w in range(num_words):
            tokens = np.flatnonzero(WORD_IDS[b] == w)
            if tokens.size == 0:
                continue
            rows = h[b, tokens].astype(np.float64)
            out[b, w] = {
                "first": rows[0],
                "mean": rows.mean(0),
                "endpoints": np.concatenate([rows[0], rows[-1]]),
            }[name]
    return out


def ref_span(h: np.ndarray, name: str) -> np.ndarray:
    out = np.zeros((B, SPANS.shape[1], H * (2 if name == "endpoints" else 1)))
    for b in range(B):
        for s, (start, end) in enumerate(SPANS[b]):
            if start < 0:
                continue
            rows = h[b, start : end + 1].astype(np.float64)
            out[b, s] = np.concatenate([rows[0], rows[-1]]) if name == "endpoints" else rows.mean(0)
    return out


def unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- Recipe.pool


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("mean", [("mean", False)]),
        ("cls", [("cls", False)]),
        ("max", [("max", False)]),
        ("cls+mean", [("cls", False), ("mean", False)]),
        ("mean_no_special", [("mean", True)]),
        ("cls+max_no_special", [("cls", False), ("max", True)]),
    ],
)
def test_sequence_level_matches_masked_reference(batch, name, parts):
    got = Recipe.parse(name).pool(batch)
    want = np.concatenate([ref_sequence(batch.hidden, n, d) for n, d in parts], -1)
    assert got.shape == (B, H * len(parts))
    close(got, want)


def test_sequence_level_mixes_layers_and_normalises(batch):
    mixed = (batch.hidden_states[-1].astype(np.float64) + batch.hidden_states[-2]) / 2
    want = ref_sequence(mixed, "mean", False)
    close(Recipe.parse("mean@-1,-2").pool(batch), want)
    close(Recipe.parse("mean@-1,-2/l2").pool(batch), unit(want))
    # Unset normalisation follows the model; /raw never normalises.
    close(Recipe.parse("mean@-1,-2").pool(batch, model_normalize=True), unit(want))
    close(Recipe.parse("mean@-1,-2/raw").pool(batch, model_normalize=True), want)
    concat = Recipe.parse("cls@-1,-2:concat").pool(batch)
    first = [ref_sequence(batch.hidden_states[k], "cls", False) for k in (-1, -2)]
    close(concat, np.concatenate(first, -1))


def test_sequence_level_refuses_rows_left_empty_and_zeros_them_on_request(batch):
    batch.special_tokens_mask = SPECIAL | (MASK != 0)  # every real token is special
    with pytest.raises(ValueError, match="non-special token"):
        Recipe.parse("mean_no_special").pool(batch)
    got = Recipe.parse("mean_no_special").pool(batch, empty="zeros")
    assert got.shape == (B, H) and not got.any()


@pytest.mark.parametrize("name", ["first", "mean", "endpoints"])
def test_word_level_matches_reference(batch, name):
    r = Recipe(name, level="word")
    got = r.pool(batch, num_words=3)
    assert got.shape == (B, 3, r.pooled_dim(H))
    close(got, ref_word(batch.hidden, name, 3))
    close(
        Recipe.parse(f"word:{name}/l2").pool(batch, num_words=3),
        unit(ref_word(batch.hidden, name, 3)),
    )


@pytest.mark.parametrize("name", ["endpoints", "mean"])
def test_span_level_matches_reference(batch, name):
    got = Recipe(name, level="span").pool(batch, spans=SPANS)
    assert got.shape == (B, 2, H * (2 if name == "endpoints" else 1))
    close(got, ref_span(batch.hidden, name))
    mixed = np.mean([batch.hidden_states[k].astype(np.float64) for k in (-1, -2)], 0)
    got = Recipe.parse(f"span:{name}@-1,-2/l2").pool(batch, spans=SPANS)
    close(got, unit(ref_span(mixed, name)))


def test_model_normalisation_applies_to_sequences_only(batch):
    """A model that normalises says so for sequence vectors; word and span recipes
    normalise only when they say /l2."""
    close(Recipe("first", level="word").pool(batch, num_words=3, model_normalize=True),
          ref_word(batch.hidden, "first", 3))  # fmt: skip
    close(Recipe("mean", level="span").pool(batch, spans=SPANS, model_normalize=True),
          ref_span(batch.hidden, "mean"))  # fmt: skip


# ---------------------------------------------------------------- nn modules from recipes


def tensors(batch: SimpleNamespace):
    return (
        torch.from_numpy(batch.hidden),
        torch.from_numpy(MASK),
        torch.from_numpy(SPECIAL),
    )


@pytest.mark.parametrize("check", [True, "full", False])
@pytest.mark.parametrize(
    ("spelling", "recipe"),
    [
        (("mean",), "mean"),
        (("cls+mean",), "cls+mean"),
        ((["cls", "max"],), "cls+max"),
        (("cls+mean", True), "cls_no_special+mean_no_special"),
        (("max", True), "max_no_special"),
    ],
)
def test_pooler_of_a_recipe_equals_pooler_of_its_string(batch, check, spelling, recipe):
    hidden, mask, special = tensors(batch)
    text, *ex = spelling
    by_string = Pooler(text, exclude_special=bool(ex), check=check)
    by_recipe = Pooler(Recipe.parse(recipe), check=check)
    assert by_string.recipe == by_recipe.recipe
    assert repr(by_string) == repr(by_recipe)
    for grad in (False, True):
        h = hidden.clone().requires_grad_(grad)
        a, b = by_string(h, mask, special), by_recipe(h, mask, special)
        assert torch.equal(a, b)
        assert a.requires_grad == grad


def test_pooler_pools_as_the_recipe(batch):
    hidden, mask, special = tensors(batch)
    got = Pooler("mean_no_special/l2")(hidden.requires_grad_(True), mask, special)
    got.sum().backward()  # differentiable through the recipe's normalisation
    assert hidden.grad is not None
    close(got.detach().numpy(), unit(ref_sequence(batch.hidden, "mean", True)))
    layers = tuple(torch.from_numpy(x) for x in batch.hidden_states)
    pooler = Pooler(Recipe.parse("max@-1,-2:concat"))
    assert pooler.output_dim(H) == 2 * H
    want = np.concatenate(
        [ref_sequence(batch.hidden_states[k], "max", False) for k in (-1, -2)], -1
    )
    close(pooler(layers, mask).numpy(), want)


def test_pooler_refuses_recipes_it_cannot_pool():
    for name in ("word:first", "mean/int8", "mean/256/binary"):  # /256 alone: test_nn
        with pytest.raises(ValueError, match="Expected `recipe` to be a sequence recipe"):
            Pooler(name)
    with pytest.raises(ValueError, match="Expected `recipe` to be a word-level recipe"):
        WordPooler(Recipe.parse("mean"))


def test_word_pooler_of_a_recipe_equals_its_string(batch):
    hidden = torch.from_numpy(batch.hidden)
    ids = torch.from_numpy(WORD_IDS)
    for name in ("first", "mean", "endpoints"):
        by_string = WordPooler(name)(hidden, ids, num_words=3)
        by_recipe = WordPooler(Recipe(name, level="word"))(hidden, ids, num_words=3)
        assert torch.equal(by_string, by_recipe)
    got = WordPooler(Recipe.parse("word:mean/l2"))(hidden, ids, num_words=3)
    close(got.numpy(), unit(ref_word(batch.hidden, "mean", 3)))
