"""poolkit's tokenizer (``tokenizers`` alone) against ``transformers.AutoTokenizer``.

The reference is ``AutoTokenizer.from_pretrained(folder)`` (what sentence-transformers and the
model's own pipeline tokenize with), called as a user would. poolkit's tokenizer is loaded
twice in a fresh cache: the first load asks transformers and writes the record, the second
must come from the record alone (transformers' loader is made to fail). Both must give the
same ids, offsets, word ids, special-token template, pad/eos/unk ids, special ids, padding
side, input names and max length as the reference, on every tiny family of
tests/tiny_models.py and on all-MiniLM-L6-v2, for texts that stress tokenizers.
"""

from __future__ import annotations

import json
import logging
import warnings

import pytest
from tiny_models import FAMILIES, build_all, build_family

import poolkit.model_folder
from poolkit.io.integrity import IntegrityWarning
from poolkit.tokenizer import TextTokenizer, load_tokenizer, tokenizer_cache_key

TEXTS = [
    "hello world",
    "",
    " ",
    "  leading and trailing  ",
    "tabs\tand\nnew\r\nlines",
    "Représentation des phrases — naïve café, façade, Zürich.",
    "e\u0301 combining, \u00e9 precomposed, ﬁ ligature, Ｆｕｌｌ width",
    "東京は日本の首都です。 北京欢迎你",
    "مرحبا بالعالم שלום",
    "Emoji 🙂 and 🚀, family 👨‍👩‍👧, flags 🇫🇷",
    "zero\u200bwidth\u00a0nbsp",
    "literal specials: [CLS] [SEP] [PAD] [MASK] [UNK] <s> </s> <pad> <unk> <mask> <|endoftext|>",
    "[SEP]",
    "<|endoftext|>",
    "query: how do cats sleep?",
    "Instruct: Given a web search query, retrieve relevant passages. Query: what is pooling",
    "numbers 12345 6.02e23 and URLs like https://example.com/a?b=c&d=e#f",
    "The quick brown fox jumps over the lazy dog. " * 60,  # long: far past any max length
]
WORDS = [
    ["John", "works", "at", "Google", "in", "London", "."],
    ["naïve", "café", "🙂", "東京"],
    ["[SEP]", "word", "<s>"],
    ["a"],
]


def _folders(root):
    logging.disable(logging.WARNING)
    try:
        out = {name: build_family(name, root / name) for name in FAMILIES}
        tiny = build_all(root / "tiny")
    finally:
        logging.disable(logging.NOTSET)
    out.update({f"tiny_{k}": v for k, v in tiny.items() if k in ("bert_plain", "gpt2_left")})
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory, minilm_dir):
    return {**_folders(tmp_path_factory.mktemp("tok_families")), "minilm": minilm_dir}


@pytest.fixture(scope="module")
def loaded(folders, tmp_path_factory):
    """name -> (poolkit tokenizer built by transformers, the same read back from the cache,
    transformers' AutoTokenizer)."""
    from transformers import AutoTokenizer

    cache = tmp_path_factory.mktemp("tok_cache")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POOLKIT_CACHE", str(cache))
        for name, path in folders.items():
            first = load_tokenizer(path)
            assert (cache / "tokenizers" / f"{tokenizer_cache_key(path)}.json").is_file()
            with pytest.MonkeyPatch.context() as no_hf:
                no_hf.setattr(poolkit.model_folder, "load_transformers_tokenizer", _no_transformers)
                second = load_tokenizer(path)
            out[name] = (first, second, AutoTokenizer.from_pretrained(str(path)))
    return out


def _no_transformers(path):
    raise AssertionError(f"transformers asked for {path}: the cached record was not used")


NAMES = [*FAMILIES, "tiny_bert_plain", "tiny_gpt2_left", "minilm"]


def _ours(tok: TextTokenizer, items, words=False, special=False):
    enc = tok.encode_batch(items, special_tokens=special, words=words)
    return [(e.ids, e.offsets, e.word_ids) for e in enc]


def _theirs(hf, items, words=False, special=False):
    enc = hf(items, add_special_tokens=special, is_split_into_words=words,
             return_offsets_mapping=True)  # fmt: skip
    return [
        (ids, [tuple(o) for o in off], enc.word_ids(i))
        for i, (ids, off) in enumerate(zip(enc["input_ids"], enc["offset_mapping"], strict=True))
    ]


@pytest.mark.parametrize("name", NAMES)
def test_same_tokens_as_transformers(loaded, name):
    first, second, hf = loaded[name]
    for tok in (first, second):
        for special in (False, True):
            assert _ours(tok, TEXTS, special=special) == _theirs(hf, TEXTS, special=special)
            assert _ours(tok, WORDS, True, special) == _theirs(hf, WORDS, True, special)
        for text in TEXTS:  # one text at a time too (the template probe, prompts, spans CLI)
            assert tok.encode(text).ids == hf(text)["input_ids"]
            assert tok.encode(text, special_tokens=False).ids == hf(
                text, add_special_tokens=False)["input_ids"]  # fmt: skip
        ids = hf(TEXTS[11])["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
        assert tok.convert_ids_to_tokens(ids[0]) == hf.convert_ids_to_tokens(ids[0])


@pytest.mark.parametrize("name", NAMES)
def test_same_facts_as_transformers(loaded, name):
    first, second, hf = loaded[name]
    limit = hf.model_max_length if hf.model_max_length < 2**62 else None
    for tok in (first, second):
        assert tok.pad_token_id == hf.pad_token_id
        assert tok.eos_token_id == hf.eos_token_id
        assert tok.unk_token_id == hf.unk_token_id
        assert list(tok.all_special_ids) == [int(i) for i in hf.all_special_ids]
        assert tok.padding_side == hf.padding_side
        assert list(tok.model_input_names) == list(hf.model_input_names)
        assert tok.model_max_length == limit
        assert tok.kind.startswith(f"fast {type(hf).__name__} (")
        # No truncation or padding carried over: poolkit truncates and pads itself.
        assert tok.backend_tokenizer.truncation is None and tok.backend_tokenizer.padding is None


@pytest.mark.parametrize("name", ["bert_dense", "t5", "qwen3_eos", "roberta", "minilm"])
def test_encoder_template_and_pad_match_transformers(loaded, folders, name):
    """The Encoder's prefix/suffix (found by probing) and pad id are transformers'."""
    from poolkit import Encoder

    _, _, hf = loaded[name]
    enc = Encoder(folders[name], device="cpu")
    full, bare = hf("hello")["input_ids"], hf("hello", add_special_tokens=False)["input_ids"]
    special = enc.special_tokens
    assert [*special.prefix, *bare, *special.suffix] == full
    pad = hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id
    assert special.pad_id == pad
    unk = {hf.unk_token_id}
    assert list(special.special_ids) == sorted(set(hf.all_special_ids) - unk)


def test_damaged_record_is_rebuilt_with_a_warning(minilm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path))
    good = load_tokenizer(minilm_dir)
    file = tmp_path / "tokenizers" / f"{tokenizer_cache_key(minilm_dir)}.json"
    data = bytearray(file.read_bytes())
    at = data.index(b"[SEP]")
    data[at + 1 : at + 4] = b"SEQ"  # still valid JSON, another pipeline: only the hash shows it
    file.write_bytes(bytes(data))
    with pytest.warns(IntegrityWarning, match="damaged tokenizer cache file"):
        again = load_tokenizer(minilm_dir)
    assert again.encode(TEXTS[11]).ids == good.encode(TEXTS[11]).ids
    assert again.backend_tokenizer.to_str() == good.backend_tokenizer.to_str()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten whole: the next load is silent
        load_tokenizer(minilm_dir)


def test_changed_tokenizer_files_change_the_key(minilm_dir, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    shutil.copytree(minilm_dir, folder)
    assert load_tokenizer(folder).padding_side == "right"
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["padding_side"] = "left"
    cfg_path.write_text(json.dumps(cfg))
    assert load_tokenizer(folder).padding_side == "left"
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.json"))) == 2


def test_unwritable_cache_still_loads(minilm_dir, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("POOLKIT_CACHE", str(blocker))  # <file>/tokenizers cannot be made
    tok = load_tokenizer(minilm_dir)
    assert tok.encode("hello world").ids == [101, 7592, 2088, 102]
