"""Unusual text must work: scripts, emoji, combining marks, invisible and control characters.

``embed`` must agree with a plain Hugging Face forward pass of each text alone, and the
offsets of ``embed_tokens`` / the token spans of ``embed_spans`` must point at the right
characters when the original text is sliced with them.
"""

from __future__ import annotations

import numpy as np
import pytest

from poolkit import embed, embed_spans, embed_tokens

pytestmark = pytest.mark.slow

UNUSUAL = {
    "cjk": "東京は日本の首都です。北京欢迎你",
    "emoji": "I love pizza 🍕🍕 and 👩‍👩‍👧 families 🇫🇷!",
    "arabic": "مرحبا بالعالم، كيف حالك؟",
    "hebrew": "שלום עולם, mixed with English",
    "combining": "Cafe\u0301 na\u0308ive Zoe\u0308 — e\u0301te\u0301",
    "zero_width": "zero\u200bwidth\u200cjoin\u200dhere and\ufeffbom",
    "controls": "tab\there\x07bell\x1bescape\x7fdel\x0bvt",
    "whitespace": " \t \u3000\u00a0 ",
    "punctuation": "?!... ;;; --- (((***)))",
    "unknown_only": "Ƣ",
    "mixed": "Ünïcödé ǅ ﬁ ℌ 𝔘𝔫𝔦 123 ٣٤٥",
}


@pytest.fixture(scope="module")
def ref(minilm_dir):
    from text_reference import Reference

    return Reference(minilm_dir)


@pytest.fixture(scope="module")
def tokens(minilm):
    return dict(zip(UNUSUAL, embed_tokens(list(UNUSUAL.values()), minilm), strict=True))


def test_embed_matches_reference(minilm, ref):
    got = embed(list(UNUSUAL.values()), minilm)
    assert got.shape == (len(UNUSUAL), 384) and np.isfinite(got).all()
    for i, text in enumerate(UNUSUAL.values()):
        np.testing.assert_allclose(got[i], ref.sentence(text), atol=2e-5)


@pytest.mark.parametrize("name", list(UNUSUAL))
def test_token_offsets_slice_the_original_text(name, tokens, ref):
    text, tv = UNUSUAL[name], tokens[name]
    want_tokens, want_offsets, want_vectors = ref.tokens(text)
    assert tv.tokens == want_tokens
    np.testing.assert_array_equal(tv.offsets, want_offsets.reshape(-1, 2))
    np.testing.assert_allclose(tv.vectors, want_vectors.reshape(-1, 384), atol=2e-4)
    covered = np.zeros(len(text), bool)
    for token, (a, b) in zip(tv.tokens, tv.offsets, strict=True):
        piece = text[a:b]
        assert 0 <= a < b <= len(text) and piece.strip(), (token, a, b)
        # WordPiece lower-cases and strips accents: compare on what the token spells.
        spelled = token.removeprefix("##")
        if spelled != "[UNK]":
            assert spelled == ref.tok.backend_tokenizer.normalizer.normalize_str(piece).strip()
        assert not covered[a:b].any(), "tokens overlap"
        covered[a:b] = True
    if name in ("whitespace",):
        assert tv.tokens == []


def words_of(text: str) -> list[tuple[int, int]]:
    """Character spans of the whitespace-separated words, found without a tokenizer."""
    spans, start = [], None
    for k, ch in enumerate(text + " "):
        if ch.isspace() and start is not None:
            spans.append((start, k))
            start = None
        elif not ch.isspace() and start is None:
            start = k
    return spans


@pytest.mark.parametrize("name", [n for n in UNUSUAL if n != "whitespace"])
def test_span_token_ranges_cover_exactly_the_span(name, minilm, ref, tokens):
    text = UNUSUAL[name]
    candidates = words_of(text)
    offsets = tokens[name].offsets
    # Only spans over at least one token; a span over ignored characters alone must fail.
    spans = [(a, b) for a, b in candidates if ((offsets[:, 0] < b) & (offsets[:, 1] > a)).any()]
    ignored = [(a, b) for a, b in candidates if (a, b) not in spans]
    vectors, token_spans = embed_spans([text], [spans], minilm, return_token_spans=True)
    for (a, b), (first, last), vector in zip(spans, token_spans[0], vectors[0], strict=True):
        # token_spans count [CLS] as position 0; TokenVectors drop it.
        lo, hi = offsets[first - 1, 0], offsets[last - 1, 1]
        assert lo < b and hi > a and text[lo:hi].strip()
        assert text[a:b].strip() in text[min(lo, a) : max(hi, b)]
        inside = (offsets[:, 0] < b) & (offsets[:, 1] > a)
        assert np.flatnonzero(inside).tolist() == list(range(first - 1, last))
        np.testing.assert_allclose(vector, ref.endpoints(text, a, b), atol=2e-4)
    for a, b in ignored:
        with pytest.raises(ValueError, match=r"`char_spans\[0\]\[0\]`.*covers none"):
            embed_spans([text], [[(a, b)]], minilm)


def test_whitespace_only_span_is_refused(minilm):
    with pytest.raises(ValueError, match="covers none"):
        embed_spans([UNUSUAL["whitespace"]], [[(0, 3)]], minilm)
