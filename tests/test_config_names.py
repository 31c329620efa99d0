"""A config's shape facts under the family's own names (transformers' ``attribute_map``):
DistilBERT's ``dim``/``n_layers``, T5's ``d_model``/``num_layers``. Tiny random folders
(tests/tiny_models.py); sentence-transformers is the reference for the vectors."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_family

import poolkit as pk
from poolkit._config import config_int

TEXTS = ["Cats sleep sixteen hours a day.", "The dog, barked!", "a"]


@pytest.fixture(scope="module")
def distilbert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_family("distilbert", tmp_path_factory.mktemp("cfg") / "distilbert")


def test_distilbert_width_and_depth_are_read(distilbert):
    config = json.loads((distilbert / "config.json").read_text(encoding="utf-8"))
    assert "hidden_size" not in config and "num_hidden_layers" not in config  # its own names
    info = pk.model_info(distilbert)
    assert (info.hidden_size, info.num_layers) == (config["dim"], config["n_layers"])


def test_distilbert_token_vectors_equal_sentence_transformers(distilbert):
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(str(distilbert), device="cpu").encode(
        TEXTS, output_value="token_embeddings", convert_to_numpy=True)  # fmt: skip
    got = pk.embed(TEXTS, model=distilbert, recipe="multivector:tokens/8/l2")
    for a, b in zip(got, ref, strict=True):
        b = np.asarray(b)[:, :8]
        np.testing.assert_allclose(a, b / np.linalg.norm(b, axis=1, keepdims=True), atol=1e-5)
    muvera = pk.embed(TEXTS, model=distilbert, recipe="multivector:tokens/muvera")
    assert muvera.shape[0] == len(TEXTS)


def test_t5_and_gpt2_names(tmp_path):
    import transformers as tf

    for cfg in (tf.T5Config(d_model=24, num_layers=3), tf.GPT2Config(n_embd=24, n_layer=3)):
        raw = cfg.to_dict()
        assert (config_int(raw, "hidden_size"), config_int(raw, "num_hidden_layers")) == (24, 3)
    assert config_int({"model_type": "no-such-family", "dim": 8}, "hidden_size") == 8
    assert config_int({"model_type": "bert"}, "hidden_size") is None
