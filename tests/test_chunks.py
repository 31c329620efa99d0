"""Long documents as chunks: ``poolkit.chunkers`` and ``embed_chunks`` against references.

- Chunk spans slice the text exactly and hold the asked number of the tokenizer's own
  tokens (WordPiece, byte-level BPE, Unigram; CJK and emoji), counted with the Hugging Face
  tokenizer's offsets, not poolkit's.
- Naive chunk vectors equal ``SentenceTransformer.encode`` of the chunk texts.
- Late chunk vectors equal the mean of the chunk's token rows from one plain
  ``transformers`` forward pass of the document; past the model's limit, of the rows of
  the windows the documented rule picks, each window run through ``transformers`` alone.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from tiny_models import build_family

from poolkit import Chunker, Encoder, InputError, InputTypeError, embed_chunks
from poolkit.chunkers import check_spans, sentence_spans, token_spans
from poolkit.output import quantize, truncate

NAMES = ("bert_dense", "roberta", "xlmr")  # WordPiece, byte-level BPE, Unigram
DOCS = [
    "John works at Google in London. He takes the train every morning! Does he like it? "
    "Nobody knows.",
    "東京は日本の首都です。北京は中国の首都です！ emoji 🙂🚀 between words 👍 and naïve café.",
    "   leading spaces, then a sentence without an end",
]


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunk_families")
    logging.disable(logging.WARNING)
    try:
        return {n: build_family(n, root / n) for n in NAMES}
    finally:
        logging.disable(logging.NOTSET)


def _hf_offsets(path, text):
    """The Hugging Face tokenizer's own offsets of ``text``'s tokens (no special tokens),
    and their word ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    return offsets, np.asarray([-1 if w is None else w for w in enc.word_ids()], np.int64)


# -- chunkers ----------------------------------------------------------------------------


def test_chunker_spellings_round_trip():
    for spelling in ("tokens:128", "tokens:256:32", "sentences", "column:spans"):
        assert str(Chunker.parse(spelling)) == spelling
    assert Chunker.parse("tokens:64:0") == Chunker("tokens", size=64)
    for bad, says in (("tokens:0", "SIZE >= 1"), ("tokens:8:8", "OVERLAP from 0 to SIZE - 1"),
                      ("tokens", "tokens:SIZE"), ("words:3", "tokens:SIZE"),
                      ("column:", "column:NAME"), ("tokens:x", "tokens:SIZE")):  # fmt: skip
        with pytest.raises(InputError, match="`chunks`") as e:
            Chunker.parse(bad)
        assert says in str(e.value), (bad, str(e.value))
    with pytest.raises(InputTypeError, match="`chunks`"):
        Chunker.parse(128)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("size", "overlap"), [(1, 0), (3, 0), (5, 2), (4, 3)])
def test_token_chunks_slice_the_text_and_count_the_tokenizers_tokens(families, name, size,
                                                                     overlap):  # fmt: skip
    for text in DOCS:
        offsets, word_ids = _hf_offsets(families[name], text)
        real = offsets[offsets[:, 1] > offsets[:, 0]]
        words = word_ids[offsets[:, 1] > offsets[:, 0]]
        spans = token_spans(text, offsets, size, overlap, word_ids)
        assert len(spans) and spans.dtype == np.int64
        covered = set()
        prev = (-1, -1)
        for a, b in spans.tolist():
            # The tokens inside the span, by the tokenizer's offsets.
            # The tokens inside the span, by the tokenizer's offsets (a leading space of a
            # token's offsets may lie outside: the span is trimmed of edge whitespace).
            inside = np.flatnonzero((real[:, 1] > a) & (real[:, 0] < b))
            assert len(inside) and text[a:b] == text[a:b].strip() and text[a:b]
            assert not text[real[inside[0], 0] : a].strip()
            assert not text[b : real[inside, 1].max()].strip()
            # No token is cut: every token lies wholly inside or wholly outside the span.
            cut = (real[:, 0] < b) & (real[:, 1] > a) & ((real[:, 0] < a) | (real[:, 1] > b))
            assert all(not text[x : max(x, a)].strip() and not text[min(y, b) : y].strip()
                       for x, y in real[cut].tolist())  # fmt: skip
            assert len(inside) <= size or np.all(real[inside[1:], 0] < real[inside[:-1], 1])
            # Cut between words: a chunk starts or ends inside a word only when that word
            # alone has more tokens than a chunk.
            first, last = inside[0], inside[-1]
            while first > 0 and not text[real[first - 1, 0] : real[first - 1, 1]].strip():
                first -= 1  # a "▁" token of the chunk's first word, trimmed off the span
            if first > 0 and words[first] == words[first - 1]:
                assert real[first, 0] > real[first - 1, 1] or (words == words[first]).sum() > size
            if last + 1 < len(real) and words[last] == words[last + 1]:
                assert real[last + 1, 0] > real[last, 1] or (words == words[last]).sum() > size
            # Chunks move forward (two may start at one character when whitespace tokens,
            # counted as tokens, are trimmed off the first).
            assert a >= prev[0] and b >= prev[1] and (a, b) != prev
            prev = (a, b)
            covered.update(inside.tolist())
        words = {t for t, (x, y) in enumerate(real.tolist()) if text[x:y].strip()}
        assert words <= covered  # every token with text is in a chunk
        if overlap == 0:
            assert np.all(spans[1:, 0] >= spans[:-1, 1])


def test_token_chunks_keep_tokens_that_share_a_character_together():
    # Three byte-level pieces share the characters 5..7 (as the pieces of one emoji share
    # its character): no cut falls between them.
    offsets = np.array([[0, 4], [5, 7], [5, 7], [5, 7], [8, 12]])
    text = "abcd xy efgh"
    spans = token_spans(text, offsets, 2, 0)
    assert spans.tolist() == [[0, 4], [5, 7], [8, 12]]
    assert token_spans(text, offsets, 1, 0).tolist() == [[0, 4], [5, 7], [8, 12]]
    assert token_spans(text, np.zeros((0, 2)), 4).shape == (0, 2)


def test_sentence_chunks():
    text = 'He said "Go!" Then left.  New one?Not split.\n\nParagraph…  東京です。北京です！ end'
    spans = sentence_spans(text)
    pieces = [text[a:b] for a, b in spans.tolist()]
    assert pieces == ['He said "Go!"', "Then left.", "New one?Not split.", "Paragraph…",
                      "東京です。", "北京です！", "end"]  # fmt: skip
    assert sentence_spans("   ").shape == (0, 2)
    assert sentence_spans("no mark").tolist() == [[0, 7]]


def test_user_spans_are_checked():
    assert check_spans("abc def", [(0, 3), (4, 7)], "chunks[0]").tolist() == [[0, 3], [4, 7]]
    cases = [([(0, 9)], "chunks[0][0]", "len(text) = 7"), ([(3, 3)], "chunks[0][0]", "start < end"),
             ([(0, 4), (2, 7)], "chunks[0][1]", "do not overlap"), ([], "chunks[0]", "at least one"),
             ([(3, 4)], "chunks[0][0]", "whitespace only")]  # fmt: skip
    for spans, arg, says in cases:
        with pytest.raises(InputError, match=rf"`{arg.replace('[', '.').replace(']', '.')}`") as e:
            check_spans("abc def", spans, "chunks[0]")
        assert says in str(e.value), str(e.value)
    with pytest.raises(InputTypeError, match="pairs of ints"):
        check_spans("abc def", [(0.0, 3.0)], "chunks[0]")


# -- naive chunks: SentenceTransformer.encode of the chunk texts -------------------------


@pytest.mark.parametrize("chunks", ["tokens:16:4", "sentences"])
def test_naive_chunks_equal_sentence_transformers(minilm, minilm_st, sts_dev, chunks):
    docs = [" ".join(sts_dev[i : i + 12]) for i in range(0, 60, 12)] + DOCS
    out = embed_chunks(docs, chunks, model=minilm)
    assert len(out) == len(docs)
    texts = [t for doc, c in zip(docs, out, strict=True) for t in c.texts(doc)]
    ref = minilm_st.encode(texts, convert_to_numpy=True)
    got = np.concatenate([c.vectors for c in out])
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_naive_chunks_equal_sentence_transformers_on_other_tokenizers(families, name):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(families[name]), device="cpu")
    out = embed_chunks(DOCS, "tokens:5:1", model=families[name], prompt="")
    texts = [t for doc, c in zip(DOCS, out, strict=True) for t in c.texts(doc)]
    ref = st.encode(texts, convert_to_numpy=True, prompt="")
    np.testing.assert_allclose(np.concatenate([c.vectors for c in out]), ref, atol=1e-5)


# -- late chunks: the document's own token rows -----------------------------------------


def _hf_rows(path, ids):
    """Last hidden state of one plain ``transformers`` forward pass over ``ids``."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path)).eval()
    with torch.no_grad():
        t = torch.tensor([ids])
        return model(input_ids=t, attention_mask=torch.ones_like(t)).last_hidden_state[0].numpy()


def _transformer_dir(path):
    """The Hugging Face model inside a sentence-transformers folder (its first module)."""
    return path if (path / "config.json").exists() else path / "0_Transformer"


@pytest.mark.parametrize("chunks", ["tokens:7:2", "sentences"])
def test_late_chunks_inside_the_limit_pool_one_forward_pass(minilm, minilm_dir, chunks):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm_dir))
    doc = DOCS[0]
    enc = tok(doc, return_offsets_mapping=True)
    rows = _hf_rows(minilm_dir, enc["input_ids"])
    off = np.asarray(enc["offset_mapping"])
    for strategy, reduce in (("mean", np.mean), ("max", np.max)):
        (got,) = embed_chunks([doc], chunks, model=minilm, strategy=strategy, late=True,
                              normalize=False, pipeline="pooled")  # fmt: skip
        for k, (a, b) in enumerate(got.spans.tolist()):
            # The chunk's tokens: every real token whose characters overlap the chunk's.
            sel = (off[:, 1] > off[:, 0]) & (off[:, 0] < b) & (off[:, 1] > a)
            np.testing.assert_allclose(got.vectors[k], reduce(rows[sel], axis=0), atol=1e-5)


def _windows(n, w, step):
    """The documented rule, written out: window starts and, per token, its window."""
    starts = [*range(0, max(n - w, 0), step), max(n - w, 0)]
    owner = np.zeros(n, np.int64)
    for k in range(1, len(starts)):
        cut = (starts[k - 1] + w + starts[k]) // 2  # the middle of the two windows' overlap
        owner[cut:] = k
    return starts, owner


@pytest.mark.parametrize("stride", [None, 5])
def test_late_chunks_past_the_limit_take_each_token_from_its_window(minilm_dir, stride):
    from transformers import AutoTokenizer

    enc_small = Encoder(minilm_dir, device="cpu", max_length=16)  # 14 text tokens a window
    tok = AutoTokenizer.from_pretrained(str(minilm_dir))
    doc = DOCS[0] + " " + DOCS[0]
    e = tok(doc, add_special_tokens=False, return_offsets_mapping=True)
    ids, off = e["input_ids"], np.asarray(e["offset_mapping"])
    n, w = len(ids), 14
    assert n > 2 * w
    starts, owner = _windows(n, w, stride or w // 2)
    per_window = [_hf_rows(minilm_dir, [tok.cls_token_id, *ids[a : a + w], tok.sep_token_id])
                  for a in starts]  # fmt: skip
    rows = np.stack([per_window[owner[t]][1 + t - starts[owner[t]]] for t in range(n)])
    (got,) = embed_chunks([doc], "tokens:6:1", model=enc_small, late=True, normalize=False,
                          pipeline="pooled", stride=stride)  # fmt: skip
    for k, (a, b) in enumerate(got.spans.tolist()):
        sel = (off[:, 0] < b) & (off[:, 1] > a)
        np.testing.assert_allclose(got.vectors[k], rows[sel].mean(axis=0), atol=1e-5)
    # The same rows as the token level's windows (one rule, one implementation).
    from poolkit import embed_tokens

    (tv,) = embed_tokens([doc], model=enc_small, long_text="window")
    if stride is None:
        np.testing.assert_allclose(tv.vectors, rows, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_late_chunks_on_other_tokenizers_with_a_prompt(families, name):
    """The prompt goes before the document, outside every chunk; chunk tokens by overlap."""
    from transformers import AutoTokenizer

    path = families[name]
    hf = _transformer_dir(path)
    tok = AutoTokenizer.from_pretrained(str(hf))
    doc, prompt = "東京です。北京！ emoji 🙂 naïve café. end", "query: "  # fits the tiny models
    enc = tok(prompt + doc, return_offsets_mapping=True)
    rows = _hf_rows(hf, enc["input_ids"])
    off = np.asarray(enc["offset_mapping"]) - len(prompt)  # offsets into the user's text
    # Special tokens are the template's; [UNK] stands for real text (CJK in a tiny vocabulary).
    special = np.isin(enc["input_ids"], sorted(set(tok.all_special_ids) - {tok.unk_token_id}))
    model = Encoder(path, device="cpu", max_length=128)  # the whole document in one pass
    (got,) = embed_chunks([doc], "sentences", model=model, strategy="mean", late=True,
                          normalize=False, pipeline="pooled", prompt=prompt)  # fmt: skip
    assert got.texts(doc) == ["東京です。", "北京！", "emoji 🙂 naïve café.", "end"]
    for k, (a, b) in enumerate(got.spans.tolist()):
        sel = ~special & (off[:, 1] > off[:, 0]) & (off[:, 0] < b) & (off[:, 1] > a)
        np.testing.assert_allclose(got.vectors[k], rows[sel].mean(axis=0), atol=1e-5)


def test_late_chunks_apply_the_models_pipeline_and_output_stage(minilm, minilm_dir):
    docs = DOCS[:2]
    pooled = embed_chunks(docs, "sentences", model=minilm, late=True, pipeline="pooled")
    full = embed_chunks(docs, "sentences", model=minilm, late=True)  # mean + Normalize
    for p, f in zip(pooled, full, strict=True):
        unit = p.vectors / np.linalg.norm(p.vectors, axis=1, keepdims=True)
        np.testing.assert_allclose(f.vectors, unit, atol=1e-6)
    staged = embed_chunks(docs, "sentences", model=minilm, late=True, dims=128,
                          precision="binary")  # fmt: skip
    for f, s in zip(full, staged, strict=True):
        ref = quantize(truncate(f.vectors, 128, normalize=True), "binary", None)
        assert s.vectors.dtype == np.int8 and np.array_equal(s.vectors, ref)
    both = embed_chunks(docs, "sentences", model=minilm, late=True, recipe=["mean", "max@last4"])
    assert set(both[0].vectors) == {"mean", "max@last4"}
    np.testing.assert_allclose(both[0].vectors["mean"], full[0].vectors, atol=1e-6)


def test_user_spans_and_spans_are_the_same_for_both_ways(minilm):
    doc = DOCS[0]
    spans = [[(0, 31), (32, 65)]]
    naive = embed_chunks([doc], spans, model=minilm)[0]
    late = embed_chunks([doc], spans, model=minilm, late=True)[0]
    assert naive.spans.tolist() == late.spans.tolist() == [[0, 31], [32, 65]]
    assert naive.texts(doc) == ["John works at Google in London.", "He takes the train every "
                                "morning!"]  # fmt: skip
    assert not np.allclose(naive.vectors, late.vectors)  # context changes the vectors


def test_bad_input_names_the_argument(minilm):
    cases = [
        (dict(chunks="tokens:0"), InputError, "SIZE >= 1"),
        (dict(chunks="tokens:300"), InputError, "a chunk size from 1 to 254 tokens"),
        (dict(chunks="tokens:8:9"), InputError, "OVERLAP"),
        (dict(chunks="column:x"), InputError, "per-document spans"),
        (dict(chunks=[[(0, 500)]]), InputError, "len(text)"),
        (dict(chunks=[[(0, 5), (3, 9)]]), InputError, "do not overlap"),
        (dict(chunks=[[(0, 5)], [(0, 5)]]), InputError, "one list of spans per document (1)"),
        (dict(late=True, strategy="cls"), InputError, "no [CLS]"),
        (dict(stride=4), InputError, "`stride`"),
        (dict(late=True, stride=0), InputError, "`stride`"),
    ]
    for kwargs, kind, says in cases:
        with pytest.raises(kind) as e:
            embed_chunks([DOCS[0]], model=minilm, **kwargs)
        assert says in str(e.value), (kwargs, str(e.value))
    with pytest.raises(InputError, match=r"`documents\[1\]`"):
        embed_chunks(["fine", "  "], model=minilm)
