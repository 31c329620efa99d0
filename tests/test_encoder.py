"""Encoder: tokenization layout, token-budget batching, padding sides, long texts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from poolkit.encoder import Encoder

TEXTS = [
    "John works at Google",
    "A cat.",
    "Pooling turns token vectors into one vector per text.",
    "",
]


def _hf_alone(path, text, max_length, add_eos=False):
    """Independent reference: plain transformers, one text, no padding."""
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    ids = tok(text, truncation=True, max_length=max_length - add_eos)["input_ids"]
    if add_eos:
        ids = [*ids, tok.eos_token_id]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return ids, out.last_hidden_state[0].numpy(), [h[0].numpy() for h in out.hidden_states]


def _rows(encoder, texts, **kw):
    """Per input text: (ids, hidden) of its real tokens, in input order."""
    rows = {}
    for b in encoder.iter_batches(texts, **kw):
        for j, i in enumerate(b.indices):
            real = b.attention_mask[j] == 1
            rows[int(i)] = (
                b.input_ids[j][real].tolist(),
                b.hidden[j][torch.from_numpy(real)].numpy(),
            )
    return [rows[i] for i in range(len(texts))]


def test_layout_matches_the_tokenizer_and_model(minilm, minilm_dir):
    for text, (ids, hidden) in zip(TEXTS, _rows(minilm, TEXTS), strict=True):
        ref_ids, ref_hidden, _ = _hf_alone(minilm_dir, text, 256)
        assert ids == ref_ids
        np.testing.assert_allclose(hidden, ref_hidden, atol=2e-5)


def test_batches_respect_token_budget_and_cover_every_row(minilm):
    texts = [("word " * n).strip() for n in (1, 50, 3, 20, 7, 9, 30, 2)]
    seen, lengths = [], []
    for b in minilm.iter_batches(texts, max_batch_tokens=64):
        assert b.input_ids.size <= 64 or len(b.indices) == 1
        seen.extend(b.indices.tolist())
        lengths.extend(b.attention_mask.sum(1).tolist())
    assert sorted(seen) == list(range(len(texts)))
    assert lengths == sorted(lengths, reverse=True)  # longest first: little padding


def test_special_tokens_offsets_and_word_ids(minilm):
    (b,) = list(minilm.iter_batches(["John works at Google"]))
    assert b.special_tokens_mask[0].tolist() == [True, False, False, False, False, True]
    assert b.offsets[0].tolist() == [[0, 0], [0, 4], [5, 10], [11, 13], [14, 20], [0, 0]]
    assert b.word_ids[0].tolist() == [-1, 0, 1, 2, 3, -1]
    (b,) = list(minilm.iter_batches(["a [SEP] b"]))  # typed special token is marked too
    assert b.special_tokens_mask[0].tolist() == [True, False, True, False, True]


def test_special_tokens_accessor_describes_the_layout(minilm, minilm_dir):
    tok = AutoTokenizer.from_pretrained(minilm_dir)  # independent reference: plain transformers
    st = minilm.special_tokens
    assert (st.prefix, st.suffix, st.pad_id) == (
        (tok.cls_token_id,),
        (tok.sep_token_id,),
        tok.pad_token_id,
    )
    assert st.special_ids == tuple(sorted(set(tok.all_special_ids) - {tok.unk_token_id}))
    assert tok.unk_token_id not in st.ids and {tok.cls_token_id, tok.sep_token_id} <= set(st.ids)
    assert st.ids == tuple(sorted({tok.cls_token_id, tok.sep_token_id, *st.special_ids}))
    # Every row the Encoder builds is prefix + the text's own ids + suffix, then padding.
    texts = ["John works at Google", "A cat."]
    (b,) = list(minilm.iter_batches(texts))
    for j, i in enumerate(b.indices):
        want = [*st.prefix, *tok(texts[i], add_special_tokens=False)["input_ids"], *st.suffix]
        row = b.input_ids[j].tolist()
        assert row == want + [st.pad_id] * (len(row) - len(want))
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.prefix = ()  # type: ignore[misc]


def test_truncation_is_flagged(minilm_dir):
    enc = Encoder(minilm_dir, max_length=8)
    (b,) = list(enc.iter_batches(["one two three four five six seven eight nine", "short"]))
    by_row = dict(zip(b.indices.tolist(), b.truncated.tolist(), strict=True))
    assert by_row == {0: True, 1: False}
    assert b.num_tokens[b.indices.tolist().index(0)] == 11
    assert b.input_ids.shape[1] == 8


def test_all_layers(minilm, minilm_dir):
    (b,) = list(minilm.iter_batches(["John works at Google"], all_layers=True))
    assert len(b.hidden_states) == 7 and b.hidden_states[-1] is b.hidden
    _, _, ref = _hf_alone(minilm_dir, "John works at Google", 256)
    np.testing.assert_allclose(b.hidden_states[2][0].numpy(), ref[2], atol=2e-5)


def test_chunk_mode_stitches_windows(minilm_dir):
    enc = Encoder(minilm_dir, max_length=10)  # windows of 8 text tokens, stride 4
    words = [f"w{i}" if i % 2 else "cat" for i in range(30)]
    text = " ".join(words)
    bare = enc.tokenize([text]).ids[0]
    (b,) = list(enc.iter_batches([text], long_text="window"))
    assert not b.truncated[0] and b.attention_mask.sum() == len(bare) + 2
    assert b.input_ids[0, 1:-1].tolist() == bare.tolist()
    model = AutoModel.from_pretrained(minilm_dir).eval()

    def window(start):
        ids = [101, *bare[start : start + 8].tolist(), 102]
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).last_hidden_state[0].numpy()

    # Token 0..5 come from window 0 ([CLS] too); tokens 6..9 from window 4 (cut at the
    # middle of the overlap 4..7 -> 6).
    w0, w4 = window(0), window(4)
    got = b.hidden[0].numpy()
    np.testing.assert_allclose(got[0:7], w0[0:7], atol=2e-5)
    np.testing.assert_allclose(got[7:11], w4[3:7], atol=2e-5)
    short = next(iter(enc.iter_batches(["a cat"], long_text="window"))).hidden
    np.testing.assert_allclose(
        short.numpy(), next(iter(enc.iter_batches(["a cat"]))).hidden.numpy()
    )


@pytest.mark.parametrize("append_eos", [None, True])
@pytest.mark.parametrize("name", ["gpt2", "gpt2_left"])
def test_decoder_eos_as_asked_and_padding_does_not_matter(tiny_dirs, name, append_eos):
    # Default (None): the tokenizer's own template, as the model's pipeline tokenizes;
    # append_eos=True adds the EOS on purpose.
    enc = Encoder(tiny_dirs[name], append_eos=append_eos)
    eos = enc.tokenizer.eos_token_id
    texts = ["a cat sat on the mat", "John", "The quick brown fox jumps over the lazy dog."]
    rows = _rows(enc, texts)
    for text, (ids, hidden) in zip(texts, rows, strict=True):
        ref_ids, ref_hidden, _ = _hf_alone(tiny_dirs[name], text, 64, add_eos=bool(append_eos))
        assert ids == ref_ids and (ids[-1] == eos) == bool(append_eos)
        np.testing.assert_allclose(hidden, ref_hidden, atol=1e-5)
    assert enc.special_tokens.suffix == ((eos,) if append_eos else ())
    (b,) = list(enc.iter_batches(texts))
    pad_first = b.attention_mask[:, 0] == 0
    assert pad_first.any() == (name == "gpt2_left")


def test_batch_budget_defaults_by_device(minilm):
    from poolkit.encoder import ACCELERATOR_BATCH_TOKENS, CPU_BATCH_TOKENS

    assert minilm.device == "cpu"
    assert minilm.max_batch_tokens == CPU_BATCH_TOKENS < ACCELERATOR_BATCH_TOKENS
    assert Encoder(minilm.info.path, max_batch_tokens=100).max_batch_tokens == 100


def test_input_errors(minilm):
    with pytest.raises(
        TypeError, match=r"Expected `texts` to be a list of strings, but got a single str"
    ):
        list(minilm.iter_batches("one text"))
    with pytest.raises(TypeError, match=r"Expected `texts\[1\]` to be a str, but got int"):
        list(minilm.iter_batches(["a", 3]))
    with pytest.raises(ValueError, match=r"Expected `long_text` to be 'truncate' or 'window'"):
        list(minilm.iter_batches(["a"], long_text="split"))
    with pytest.raises(
        ValueError, match=r"Expected `max_batch_tokens` to be None or a positive integer"
    ):
        Encoder(minilm.info.path, max_batch_tokens=0)
    with pytest.raises(ValueError, match=r"Expected `max_batch_tokens` to be None or a positive"):
        list(minilm.iter_batches(["a"], max_batch_tokens=0))
    with pytest.raises(ValueError, match=r"Expected `dtype` to be one of"):
        Encoder(minilm.info.path, dtype="int8")
