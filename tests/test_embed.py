"""poolkit.embed / embed_tokens / embed_words / embed_spans against independent references."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from testdata import full_data, sts_sentences
from transformers import AutoModel, AutoTokenizer

from poolkit.embedding import (
    TruncationWarning,
    embed,
    embed_spans,
    embed_tokens,
    embed_words,
    get_encoder,
)

TEXTS = [
    "John works at Google",
    "A cat sat on the mat.",
    "hi",
    "Pooling turns token vectors into one vector.",
]


@pytest.fixture(scope="module")
def hf(minilm_dir):
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    model = AutoModel.from_pretrained(minilm_dir).eval()

    def run(text, **kw):
        enc = tok(text, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            out = model(**enc, output_hidden_states=True)
        return enc["input_ids"][0].tolist(), [h[0].numpy() for h in out.hidden_states]

    return run


def test_matches_sentence_transformers_on_stsb(minilm, minilm_st, sts_dev):
    # Every 10th sentence plus the longest ones of the committed sample; all 3000: below.
    longest = sorted(range(len(sts_dev)), key=lambda i: -len(sts_dev[i]))[:20]
    texts = [sts_dev[i] for i in sorted(set(range(0, len(sts_dev), 10)) | set(longest))]
    ours = embed(texts, minilm)
    ref = minilm_st.encode(texts, convert_to_numpy=True)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), 384)
    assert np.abs(ours - ref).max() < 1e-5


@pytest.mark.slow  # the full data set: 3000 sentences, twice
@pytest.mark.data
def test_matches_sentence_transformers_on_all_of_stsb_dev(minilm, minilm_st):
    texts = sts_sentences(full_data("stsb/sts-dev.csv"))
    assert len(texts) == 3000
    ours = embed(texts, minilm)
    assert np.abs(ours - minilm_st.encode(texts, convert_to_numpy=True)).max() < 1e-5


def test_alone_equals_batched(minilm, sts_dev):
    texts = sts_dev[:40]
    batched = embed(texts, minilm, ["mean", "cls", "max", "last"], normalize=False)
    for i in (0, 7, 19, 39):
        alone = embed([texts[i]], minilm, ["mean", "cls", "max", "last"], normalize=False)
        for name in batched:
            np.testing.assert_allclose(alone[name][0], batched[name][i], atol=1e-5)


def test_strategies_against_plain_reference(minilm, hf):
    got = embed(TEXTS, minilm, ["mean", "cls", "max", "cls+mean"], normalize=False)
    for i, text in enumerate(TEXTS):
        _, layers = hf(text)
        h = layers[-1]
        np.testing.assert_allclose(got["mean"][i], h.mean(0), atol=1e-5)
        np.testing.assert_allclose(got["cls"][i], h[0], atol=1e-5)
        np.testing.assert_allclose(got["max"][i], h.max(0), atol=1e-5)
        np.testing.assert_allclose(got["cls+mean"][i], np.concatenate([h[0], h.mean(0)]), atol=1e-5)
    single = embed(TEXTS, minilm, "cls", normalize=False)
    np.testing.assert_array_equal(single, got["cls"])


def test_default_is_intended_pooling_and_normalisation(minilm, hf):
    got = embed(TEXTS, minilm)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    _, layers = hf(TEXTS[0])
    m = layers[-1].mean(0)
    np.testing.assert_allclose(got[0], m / np.linalg.norm(m), atol=1e-6)
    raw = embed(TEXTS, minilm, normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_layers_and_exclude_special(minilm, hf):
    got = embed(TEXTS[:2], minilm, "mean", normalize=False, layers="last4")
    no_special = embed(TEXTS[:2], minilm, "mean", normalize=False, exclude_special=True)
    for i, text in enumerate(TEXTS[:2]):
        _, layers = hf(text)
        np.testing.assert_allclose(got[i], np.mean(layers[-4:], axis=0).mean(0), atol=1e-5)
        np.testing.assert_allclose(no_special[i], layers[-1][1:-1].mean(0), atol=1e-5)
    with pytest.raises(ValueError) as e:
        embed(["a", "", "b", ""], minilm, exclude_special=True)
    assert str(e.value) == (
        "Expected `texts` to be texts with at least one non-special token each "
        "(`exclude_special=True`), but got texts 1, 3 with none (empty strings?). Remove them "
        "or pass exclude_special=False."
    )


def test_tiny_cls_model_uses_its_intended_pooling(tiny_dirs):
    path = tiny_dirs["bert_cls"]
    got = embed(["John works at Google", "a cat"], path)
    model = AutoModel.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        h = model(**tok("a cat", return_tensors="pt")).last_hidden_state[0, 0].numpy()
    np.testing.assert_allclose(got[1], h / np.linalg.norm(h), atol=1e-6)


def test_truncation_is_counted_and_warned(minilm):
    long = "word " * 400
    with pytest.warns(TruncationWarning, match=r"1 of 2 texts were longer than 256 tokens"):
        _, stats = embed(["short", long], minilm, return_stats=True)
    assert stats.truncated == [1] and stats.num_texts == 2 and stats.dims == {"mean": 384}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chunked = embed(["short", long], minilm, long_text="window")
    with pytest.warns(TruncationWarning):
        truncated = embed(["short", long], minilm)
    np.testing.assert_allclose(chunked[0], truncated[0], atol=1e-6)
    assert np.abs(chunked[1] - truncated[1]).max() > 1e-4


def test_huge_text_is_cut_before_tokenizing_and_gives_the_same_vector(minilm, sts_dev):
    words = " ".join(sts_dev[:400])
    huge = (words + " ") * (2_000_000 // len(words) + 1)  # about 2 MB, one text
    capped = minilm._cap_long_texts([huge])[0]
    assert huge.startswith(capped) and len(capped) < len(huge) // 10
    with pytest.warns(TruncationWarning):
        whole, stats = embed([huge], minilm, return_stats=True)
    assert stats.truncated == [0]
    # reference: the plain model on the plain tokenizer's truncation of the whole text
    tok = AutoTokenizer.from_pretrained(minilm.info.path)
    ref = tok(words[:5000], truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        out = AutoModel.from_pretrained(minilm.info.path)(**ref).last_hidden_state[0]
    mean = out.mean(0)
    np.testing.assert_allclose(whole[0], (mean / mean.norm()).numpy(), atol=1e-5)


def test_empty_input_and_cache(minilm_dir):
    assert get_encoder(minilm_dir) is get_encoder(minilm_dir)
    out = embed([], minilm_dir, ["mean", "cls+mean"])
    assert out["mean"].shape == (0, 384) and out["cls+mean"].shape == (0, 768)


def test_strategy_errors(minilm):
    # The third argument is the recipe (it was `strategy`): errors name it so.
    with pytest.raises(ValueError, match=r"Expected `recipe` to be one of cls, mean"):
        embed(["a"], minilm, "avg")
    with pytest.raises(ValueError) as e:
        embed(["a"], minilm, ["mean", "mean"])
    assert str(e.value) == (
        "Expected `recipe` to be a list of distinct names, but got ['mean', 'mean']. "
        "List each name once."
    )


def test_embed_tokens(minilm, hf):
    (tv,) = embed_tokens(["John works at Google"], minilm)
    assert tv.tokens == ["john", "works", "at", "google"]
    assert tv.offsets.tolist() == [[0, 4], [5, 10], [11, 13], [14, 20]]
    _, layers = hf("John works at Google")
    np.testing.assert_allclose(tv.vectors, layers[-1][1:-1], atol=1e-5)


def test_embed_words(minilm, hf):
    words = [["John", "works", "at", "Googleplex"], ["hi"]]
    first, mean = (embed_words(words, minilm, s) for s in ("first", "mean"))
    assert [w.shape for w in first] == [(4, 384), (1, 384)]
    ids, layers = hf("John works at Googleplex")
    h = layers[-1]
    assert len(ids) == 7  # googleplex -> google ##ple ##x
    np.testing.assert_allclose(first[0], h[[1, 2, 3, 4]], atol=1e-5)
    np.testing.assert_allclose(mean[0][3], h[4:6].mean(0), atol=1e-5)
    both = embed_words(words, minilm, "endpoints")
    assert both[0].shape == (4, 768)


def test_embed_spans_seed_example(minilm, hf):
    text = "John works at Google"
    vecs, token_spans = embed_spans([text], [[(11, 20), (0, 4)]], minilm, return_token_spans=True)
    assert token_spans[0].tolist() == [[3, 4], [1, 1]]  # "at Google" -> tokens 3..4
    _, layers = hf(text)
    h = layers[-1]
    np.testing.assert_allclose(vecs[0][0], np.concatenate([h[3], h[4]]), atol=1e-5)
    mean = embed_spans([text], [[(11, 20)]], minilm, "mean")
    np.testing.assert_allclose(mean[0][0], h[3:5].mean(0), atol=1e-5)
    partial = embed_spans([text, "a cat"], [[(15, 16)], []], minilm, "mean")  # inside "Google"
    np.testing.assert_allclose(partial[0][0], h[4], atol=1e-5)
    assert partial[1].shape == (0, 384)


def test_embed_spans_errors(minilm):
    with pytest.raises(ValueError) as e:
        embed_spans(["John works"], [[(4, 5)]], minilm)
    assert str(e.value) == (
        "Expected `char_spans[0][0]` to be a span that covers at least one token of texts[0], "
        "but got (4, 5), which covers none (only whitespace, or past the max length: pass "
        "long_text='window'). Spans are half-open [start, end) character offsets."
    )
    with pytest.raises(ValueError) as e:
        embed_spans(["John works"], [[(3, 11)]], minilm)
    assert str(e.value) == (
        "Expected `char_spans[0][0]` to be (start, end) with 0 <= start < end <= len(texts[0]) "
        "= 10, but got (3, 11). Spans are half-open character offsets, like text[start:end]."
    )
    with pytest.raises(ValueError) as e:
        embed_spans(["John works"], [[(0, 4)], [(0, 1)]], minilm)
    assert str(e.value) == "Expected `char_spans` to be one list of spans per text (1), but got 2."


def test_every_level_runs_the_same_driver(minilm_dir):
    """Truncation warning, max_batch_tokens, progress and stats, alike at every level."""
    encoder = get_encoder(minilm_dir, max_length=8)
    long = " ".join(["word"] * 40)
    calls = {
        "embed": lambda **kw: embed([long, "hi"], encoder, **kw),
        "embed_tokens": lambda **kw: embed_tokens([long, "hi"], encoder, **kw),
        "embed_words": lambda **kw: embed_words([long.split(), ["hi"]], encoder, **kw),
        "embed_spans": lambda **kw: embed_spans([long, "hi"], [[(0, 4)], [(0, 2)]], encoder, **kw),
    }
    for name, call in calls.items():
        seen: list[int] = []
        with pytest.warns(TruncationWarning, match=r"^1 of 2 .* longer than 8 tokens"):
            out, stats = call(max_batch_tokens=9, progress=seen.append, return_stats=True)
        assert len(out) == 2, name
        assert sum(seen) == 2 and len(seen) == 2, (name, seen)  # a budget of 9: one row a batch
        assert stats.truncated == [0] and stats.num_texts == 2, name
        assert stats.max_batch_tokens == 9 and stats.num_tokens == 8 + 3, name
        with pytest.raises(ValueError, match="`max_batch_tokens`"):
            call(max_batch_tokens=0)


def test_tokens_words_and_spans_pool_through_their_recipe(minilm_dir, monkeypatch):
    """The level dispatch lives in Recipe.pool: each per-token, per-word and per-span call
    goes through it once per batch (tokens: the recipe's layer mix, per_token=True)."""
    import poolkit
    from poolkit.recipe import Recipe

    calls: list[tuple[str, bool]] = []
    pool = Recipe.pool

    def spy(self, batch, **kw):
        calls.append((self.level, kw.get("per_token", False)))
        return pool(self, batch, **kw)

    monkeypatch.setattr(Recipe, "pool", spy)
    tokens = poolkit.embed_tokens(["a b", "c"], minilm_dir, layers="last4")
    poolkit.embed_words([["a", "b"]], minilm_dir, "mean")
    poolkit.embed_spans(["ab cd"], [[(0, 2)]], minilm_dir, "max")
    assert calls == [("sequence", True), ("word", False), ("span", False)]
    assert [t.tokens for t in tokens] == [["a", "b"], ["c"]]
    assert tokens[0].vectors.shape == (2, 384) and tokens[0].vectors.dtype == np.float32
