"""`poolkit.diagnose` on the real all-MiniLM-L6-v2, against vectors sentence-transformers
made (the reference) with each Pooling mode, with and without Normalize, with
``truncate_dim=128``, with ``max_seq_length=128`` and with a prompt; and vectors of another
model of the same width. Slow: 15 sentence-transformers runs and diagnoses of the real model
over texts up to 400 tokens."""

from __future__ import annotations

import numpy as np
import pytest
from testdata import sentences

import poolkit as pk

pytestmark = pytest.mark.slow

MODES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
         "weightedmean": "weighted_mean", "lasttoken": "last"}  # fmt: skip


@pytest.fixture(scope="module")
def texts() -> list[str]:
    short = sentences(40)
    pool = sentences(200)
    # 8 texts of about 120-600 tokens: past 128, and some past the model's 256
    long = [" ".join(pool[40 + 15 * k : 50 + 21 * k]) for k in range(8)]
    return short + long


@pytest.fixture(scope="module")
def transformer(minilm_dir):
    from sentence_transformers.base.modules import Transformer

    return Transformer(str(minilm_dir), max_seq_length=256)


def st(transformer, mode: str = "mean", normalize: bool = True):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    modules = [transformer, Pooling(384, pooling_mode=mode)] + ([Normalize()] if normalize else [])
    return SentenceTransformer(modules=modules, device="cpu")


def names(d) -> set[str]:
    return {a.candidate.name for a in (d.best, *d.equivalent)}


def test_the_texts_reach_past_128_and_256_tokens(minilm_dir, texts):
    tok = pk.Encoder(minilm_dir).tokenize(texts)
    counts = np.array([len(ids) + 2 for ids in tok.ids])
    assert (counts > 256).sum() >= 2 and ((counts > 128) & (counts <= 256)).sum() >= 2


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_each_pooling_mode(minilm_dir, transformer, texts, mode, normalize):
    d = pk.diagnose(texts, st(transformer, mode, normalize).encode(texts), model=minilm_dir)
    want = f"{MODES[mode]}/{'l2' if normalize else 'raw'} @256 tokens"
    assert d.best is not None and d.best.fraction >= 0.99, d.verdict
    assert want in names(d), (want, names(d))
    if "mean/l2 @256 tokens" in names(d):  # mean_sqrt_len and sum too, once normalised
        assert d.verdict.startswith("OK"), d.verdict
    else:
        assert d.verdict.startswith("MISMATCH") and d.fix.startswith("--recipe mean"), d.verdict


def test_truncate_dim_max_seq_length_and_a_prompt(minilm_dir, transformer, texts):
    model = st(transformer)
    d = pk.diagnose(texts, model.encode(texts, truncate_dim=128), model=minilm_dir)
    assert d.best.candidate.name == "mean/l2/128 (prefix not re-normalised) @256 tokens"
    assert d.best.matched == len(texts) and d.verdict.startswith("OK"), d.verdict
    model.max_seq_length = 128
    d = pk.diagnose(texts, model.encode(texts), model=minilm_dir)
    assert d.best.candidate.name == "mean/l2 @128 tokens", d.verdict
    assert d.best.matched == len(texts) and d.fix == "--max-length 256"
    model.max_seq_length = 256
    d = pk.diagnose(texts, model.encode(texts, prompt="query: "), model=minilm_dir,
                    prompts=["passage: ", "query: "])  # fmt: skip
    assert d.best.candidate.name == "mean/l2 @256 tokens prompt='query: '", d.verdict
    assert d.best.fraction >= 0.99


def test_vectors_of_another_model_match_nothing(minilm_dir, texts, tmp_path):
    import shutil

    import torch
    from sentence_transformers.base.modules import Transformer
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=384, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256)).save_pretrained(tmp_path)  # fmt: skip
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):  # fmt: skip
        shutil.copy(minilm_dir / name, tmp_path / name)
    other = st(Transformer(str(tmp_path), max_seq_length=256))
    d = pk.diagnose(texts, other.encode(texts), model=minilm_dir)
    assert d.best is None and not d.equivalent, d.verdict
    assert d.verdict.startswith("NO MATCH"), d.verdict
    assert max(a.matched for a in d.candidates) == 0
