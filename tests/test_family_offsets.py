"""Token, word and span offsets across tokenizer kinds: WordPiece, byte-level BPE (``Ġ``, with
and without trimmed offsets) and SentencePiece-style Unigram (``▁``), with and without a prompt.

Every returned offset is used to slice the user's text; span token ranges are checked
against the tokenizer's own offsets; word vectors against a plain ``transformers`` forward.
"""

from __future__ import annotations

import functools
import logging
import re

import numpy as np
import pytest
from tiny_models import build_family

from poolkit import Encoder, embed_spans, embed_tokens, embed_words

# WordPiece, byte-level BPE (trimmed offsets), byte-level BPE (raw offsets, left padding),
# Unigram with [CLS]/[SEP], Unigram with only </s> after the text.
NAMES = ("bert_dense", "roberta", "qwen3_eos", "xlmr", "t5")
TEXTS = [
    "John works at Google in London.",
    "   leading spaces",
    "trailing spaces   ",
    "multiple    inner     spaces",
    "emoji 🙂🚀 between words 👍",
    "東京は日本の首都です。 北京",
    "naïve café façade",
]
PROMPT = "query: "


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("offsets")
    logging.disable(logging.WARNING)
    try:
        return {n: Encoder(build_family(n, root / n), device="cpu", max_length=128) for n in NAMES}
    finally:
        logging.disable(logging.NOTSET)


def _spaces_only(token: str) -> bool:
    return token.strip("▁Ġ ") == ""


@pytest.mark.parametrize("prompt", ["", PROMPT])
@pytest.mark.parametrize("name", NAMES)
def test_token_offsets_slice_the_users_text(encoders, name, prompt):
    enc = encoders[name]
    out = embed_tokens(TEXTS, model=enc, prompt=prompt)
    for text, tv in zip(TEXTS, out, strict=True):
        assert len(tv.tokens) == len(tv.offsets) == len(tv.vectors) > 0
        covered = np.zeros(len(text), bool)
        prev = 0
        for token, (a, b) in zip(tv.tokens, tv.offsets.tolist(), strict=True):
            assert 0 <= a <= b <= len(text), (text, token, a, b)
            # Empty only for a bare space marker whose space was trimmed off (RoBERTa).
            assert a < b or _spaces_only(token), (text, token, a, b)
            assert a >= prev  # in text order (byte pieces of one character share offsets)
            prev = a
            piece = text[a:b]
            # A slice of only spaces comes from a token that is only a space marker.
            assert piece.strip() or _spaces_only(token), (text, token, piece)
            covered[a:b] = True
        # Every visible character of the user's text belongs to a token; no prompt token.
        visible = np.array([not c.isspace() for c in text])
        assert covered[visible].all(), (text, [t for t in tv.tokens])


@functools.cache
def _hf_tokenizer(path):
    """The model's tokenizer as transformers loads it: the reference for poolkit's."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def _reference_token_spans(enc, text, spans, prompt):
    """Inclusive positions (first real token = 0) of the tokens overlapping each span,
    from the tokenizer's own offsets on ``prompt + text``."""
    tok = _hf_tokenizer(enc.info.path)(prompt + text, return_offsets_mapping=True,
                                       return_special_tokens_mask=True)  # fmt: skip
    offsets = np.asarray(tok["offset_mapping"]) - len(prompt)
    special = np.asarray(tok["special_tokens_mask"], bool)
    out = []
    for a, b in spans:
        hit = [i for i, (s, e) in enumerate(offsets)
               if not special[i] and e > s and e > 0 and s < b and e > a]  # fmt: skip
        out.append((hit[0], hit[-1]))
    return np.asarray(out)


@pytest.mark.parametrize("prompt", ["", PROMPT])
@pytest.mark.parametrize("name", NAMES)
def test_span_token_ranges_cover_exactly_the_overlapping_tokens(encoders, name, prompt):
    enc = encoders[name]
    spans = [[m.span() for m in re.finditer(r"\S+", t)] for t in TEXTS]
    vecs, token_spans = embed_spans(TEXTS, spans, model=enc, strategy="mean", prompt=prompt,
                                    return_token_spans=True)  # fmt: skip
    for text, sp, got, v in zip(TEXTS, spans, token_spans, vecs, strict=True):
        np.testing.assert_array_equal(got, _reference_token_spans(enc, text, sp, prompt))
        assert v.shape == (len(sp), 32) and np.isfinite(v).all()


@pytest.mark.parametrize("name", NAMES)
def test_word_vectors_are_their_first_sub_token(encoders, name):
    import torch
    from transformers import AutoModel

    enc = encoders[name]
    words = [t.split() for t in TEXTS]
    got = embed_words(words, model=enc, strategy="first")
    model = AutoModel.from_pretrained(str(enc.info.path)) if name != "t5" else None
    if model is None:
        from transformers import T5EncoderModel

        model = T5EncoderModel.from_pretrained(str(enc.info.path))
    model.eval()
    for ws, vec in zip(words, got, strict=True):
        tok = _hf_tokenizer(enc.info.path)(ws, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(input_ids=tok["input_ids"],
                           attention_mask=tok["attention_mask"]).last_hidden_state[0].numpy()  # fmt: skip
        word_ids = tok.word_ids()
        assert vec.shape == (len(ws), 32)
        for w in range(len(ws)):
            first = word_ids.index(w)
            np.testing.assert_allclose(vec[w], hidden[first], atol=1e-5)
