"""The recipe keywords of earlier versions: one adapter (``poolkit._legacy``) folds them
into the recipe they spell, with the same vectors, and warns naming that recipe."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import poolkit
from poolkit import embed, embed_chunks, embed_spans, embed_words

TEXTS = ["John works at Google.", "A man is playing a guitar on a stage tonight."]


def _legacy(fn, *args, **kwargs):
    """``fn``'s result and the one DeprecationWarning it raised (file, message)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    found = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(found) == 1, [str(w.message) for w in caught]
    return out, found[0]


def test_embed_signature_is_small():
    # texts, model, recipe; prompt_name, prompt; the output stage's two fitted values
    # (calibration: int8 ranges, fit: a fitted transform); long_text, return_stats,
    # progress; **options. Everything else is a recipe or an option.
    assert len(inspect.signature(poolkit.embed).parameters) <= 11


@pytest.mark.parametrize(
    ("old", "recipe"),
    [
        ({"strategy": "max"}, "max"),
        ({"strategy": ["cls", "mean"]}, ["cls", "mean"]),
        ({"strategy": "mean", "layers": "last4", "exclude_special": True}, "mean_no_special@last4"),
        ({"normalize": False}, "mean/raw"),
        ({"dims": 128}, "mean/128"),
        ({"strategy": "cls", "dims": 64, "precision": "binary"}, "cls/64/binary"),
        ({"layers": [-1, -2], "layer_how": "concat"}, "mean@-1,-2:concat"),
    ],
)
def test_old_keywords_equal_the_recipe_and_warn(minilm, old, recipe):
    want = embed(TEXTS, minilm, recipe=recipe)
    got, warning = _legacy(embed, TEXTS, minilm, **old)
    assert warning.filename == __file__  # points at the caller's line
    message = str(warning.message)
    assert "deprecated" in message and "pass recipe=" in message
    named = message.split("pass recipe=")[1].split(" instead")[0]
    # The recipe the warning names gives the same vectors (bit for bit).
    again = embed(TEXTS, minilm, recipe=eval(named))  # a Python literal: a str or a list
    for a, b in ((got, want), (again, want)):
        if isinstance(b, dict):
            assert list(a) == list(b)
            for x, y in zip(a.values(), b.values(), strict=True):
                np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(a, b)


def test_third_positional_argument_still_takes_shorthands(minilm):
    # It was `strategy`; with layers it keeps meaning a strategy, as before.
    got, warning = _legacy(embed, TEXTS, minilm, "mean", layers="last4")
    np.testing.assert_array_equal(got, embed(TEXTS, minilm, recipe="mean@last4"))
    # The warning names what the caller wrote: `layers` only.
    assert str(warning.message).startswith(
        "embed(): `layers` is deprecated; pass recipe='mean@last4'"
    )


def test_no_warning_without_old_keywords(minilm):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        embed(TEXTS, minilm, "max", max_batch_tokens=512, pipeline="full")
        embed_words([["a", "b"]], minilm, "mean")


def test_unknown_keyword_is_refused_with_the_closest_name(minilm):
    with pytest.raises(TypeError, match=r"unexpected keyword `max_lenght`.*`max_length`"):
        embed(TEXTS, minilm, max_lenght=64)


def test_words_spans_chunks_take_the_old_keywords(minilm):
    words = [["John", "works", "at", "Google"]]
    got, _ = _legacy(embed_words, words, minilm, strategy="mean", layers="last4")
    want = embed_words(words, minilm, recipe="word:mean@last4")
    np.testing.assert_array_equal(got[0], want[0])
    spans = [[(0, 4), (14, 20)]]
    got, _ = _legacy(embed_spans, TEXTS[:1], spans, minilm, strategy="mean")
    np.testing.assert_array_equal(got[0], embed_spans(TEXTS[:1], spans, minilm, "span:mean")[0])
    got, _ = _legacy(embed_chunks, TEXTS, "tokens:4", minilm, strategy="max", dims=32)
    want = embed_chunks(TEXTS, "tokens:4", minilm, recipe="max/32")
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)


def test_recipe_and_strategy_together_is_refused(minilm):
    with pytest.raises(TypeError, match="`recipe`"):
        embed(TEXTS, minilm, recipe="mean", strategy="max")


def test_nn_modules_take_recipes_and_the_old_keywords():
    import torch

    from poolkit.nn import Pooler, SpanExtractor, WordPooler

    hidden, mask = torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    old, _ = _legacy(Pooler, strategy=["cls", "max"])
    assert old.recipe == Pooler("cls+max").recipe == Pooler(["cls", "max"]).recipe
    torch.testing.assert_close(
        old(hidden, mask), Pooler(poolkit.Recipe.parse("cls+max"))(hidden, mask)
    )
    old, _ = _legacy(WordPooler, strategy="mean")
    assert old.recipe == WordPooler("mean").recipe == WordPooler("word:mean").recipe
    old, _ = _legacy(SpanExtractor, 8, strategy="x,y,x*y")
    assert old.strategy == SpanExtractor(8, "span:x,y,x*y").strategy == ("x", "y", "x*y")
    with pytest.raises(ValueError, match="`recipe`"):
        SpanExtractor(8, "span:mean@last4")  # one hidden: no layers
