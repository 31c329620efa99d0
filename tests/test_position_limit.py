"""Max length from a RoBERTa-family position table: positions start after the padding index,
so ``max_position_embeddings`` 66 with ``pad_token_id`` 1 holds 64 tokens (514 -> 512).
Tiny random plain folders (tests/tiny_models.py) whose tokenizer states no limit, or a larger
one; a text longer than the table is cut to the usable length, as transformers' own forward
pass on the tokenizer's truncation to it gives."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import _family_parts

import poolkit as pk
from poolkit._config import position_limit

LONG = " ".join(["late interaction keeps one vector per token"] * 20)  # > 64 tokens


def _plain(name: str, dest: Path, tokenizer_limit: int | None) -> Path:
    import transformers as tf

    config, tokenizer, _ = _family_parts(name)
    torch.manual_seed(0)
    tf.AutoModel.from_config(config).eval().save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    path = dest / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg.pop("model_max_length", None)
    if tokenizer_limit is not None:
        cfg["model_max_length"] = tokenizer_limit
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return dest


@pytest.mark.parametrize("name", ["roberta", "xlmr", "mpnet"])
@pytest.mark.parametrize("tokenizer_limit", [None, 512])
def test_usable_length_is_the_table_less_the_padding_offset(tmp_path, name, tokenizer_limit):
    from transformers import AutoModel, AutoTokenizer

    folder = _plain(name, tmp_path / name, tokenizer_limit)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    usable = config["max_position_embeddings"] - config["pad_token_id"] - 1
    info = pk.model_info(folder)
    assert info.max_length == usable == 64
    assert "pad_token_id" in info.max_length_source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pk.TruncationWarning)
        got = pk.embed([LONG, "a"], model=folder, recipe="mean")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tok([LONG, "a"], truncation=True, max_length=usable, padding=True,
                return_tensors="pt")  # fmt: skip
    assert batch["input_ids"].shape[1] == usable  # the long text fills the table
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    want = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_other_tables_are_their_length():
    assert position_limit({"model_type": "bert", "max_position_embeddings": 512})[0] == 512
    assert position_limit({"model_type": "gpt2", "n_positions": 1024})[0] == 1024
    assert position_limit({"model_type": "camembert", "max_position_embeddings": 514,
                           "pad_token_id": 1})[0] == 512  # fmt: skip
    assert position_limit({"model_type": "t5"}) is None
