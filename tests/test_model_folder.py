"""Intended-pooling detection and model resolution, on directories written by the tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poolkit.model_folder import ModelNotFoundError, model_info, read_model_info, resolve_model

POOLING = "sentence_transformers.models.Pooling"


def _model_dir(root: Path, pooling: dict | None = None, *, normalize: bool = False,
               config: dict | None = None) -> Path:  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    cfg = config or {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 8,
                     "num_hidden_layers": 2, "max_position_embeddings": 128}  # fmt: skip
    (root / "config.json").write_text(json.dumps(cfg))
    if pooling is not None or normalize:
        modules = [{"idx": 0, "name": "0", "path": "", "type": "x.models.Transformer"}]
        if pooling is not None:
            modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": POOLING})
            (root / "1_Pooling").mkdir(exist_ok=True)
            (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
        if normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})  # fmt: skip
        (root / "modules.json").write_text(json.dumps(modules))
    return root


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [
        ({"pooling_mode": "cls"}, "cls"),
        ({"pooling_mode": "lasttoken"}, "last"),
        ({"pooling_mode": "weightedmean"}, "weighted_mean"),
        ({"pooling_mode": "mean_sqrt_len_tokens"}, "mean_sqrt_len"),
        ({"pooling_mode": ["cls", "mean"]}, "cls+mean"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}, "mean"),
        ({"pooling_mode_cls_token": True}, "cls"),
        ({"pooling_mode_max_tokens": True}, "max"),
        ({"pooling_mode_mean_sqrt_len_tokens": True}, "mean_sqrt_len"),
        ({"pooling_mode_weightedmean_tokens": True}, "weighted_mean"),
        ({"pooling_mode_lasttoken": True}, "last"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}, "cls+mean"),
    ],
)
def test_pooling_read_from_current_and_legacy_keys(tmp_path, pooling, expected):
    info = read_model_info(_model_dir(tmp_path / "m", pooling))
    assert info.pooling == expected
    assert not info.pooling_is_guess
    assert info.pooling_source.startswith("1_Pooling/config.json: ")
    key = "pooling_mode" if "pooling_mode" in pooling else next(k for k, v in pooling.items() if v)
    assert key in info.pooling_source


def test_unknown_pooling_mode_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"Expected a pooling_mode of .*, but got 'bogus'"):
        read_model_info(_model_dir(tmp_path / "m", {"pooling_mode": "bogus"}))


def test_normalize_module_and_sbert_config(tmp_path):
    root = _model_dir(tmp_path / "m", {"pooling_mode": "mean"}, normalize=True)
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 77}))
    (root / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: "}, "default_prompt_name": "query"})
    )
    info = read_model_info(root)
    assert info.normalize and "Normalize" in info.normalize_source
    assert (info.max_length, info.max_length_source) == (
        77,
        "sentence_bert_config.json: max_seq_length",
    )
    assert info.prompts == {"query": "query: "} and info.default_prompt_name == "query"


def test_no_pooling_config_is_a_flagged_guess(tmp_path):
    info = read_model_info(_model_dir(tmp_path / "m"))
    assert (info.pooling, info.pooling_is_guess, info.normalize) == ("mean", True, False)
    assert info.pooling_source.startswith("guess:")
    assert info.max_length == 128


def test_causal_lm_guess_is_last(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8}
    info = read_model_info(_model_dir(tmp_path / "m", config=cfg))
    assert (info.pooling, info.is_decoder, info.pooling_is_guess) == ("last", True, True)
    assert "causal" in info.pooling_source


def test_dense_module_is_reported_as_not_applied(tmp_path):
    root = _model_dir(tmp_path / "m", {"pooling_mode": "mean"})
    modules = json.loads((root / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "x.models.Dense"})
    (root / "modules.json").write_text(json.dumps(modules))
    assert read_model_info(root).ignored_modules == ("Dense (2_Dense)",)


def test_tiny_models_on_disk(tiny_dirs):
    cls = model_info(tiny_dirs["bert_cls"])
    assert (cls.pooling, cls.normalize, cls.max_length) == ("cls", True, 32)
    assert cls.pooling_source == "1_Pooling/config.json: pooling_mode='cls'"
    assert cls.tokenizer_kind.startswith("fast") and cls.padding_side == "right"
    plain = model_info(tiny_dirs["bert_plain"])
    assert plain.pooling == "mean" and plain.pooling_is_guess
    assert (plain.num_layers, plain.hidden_size) == (2, 32)
    assert plain.max_length == 128  # position table caps the tokenizer's 512
    gpt2 = model_info(tiny_dirs["gpt2_left"])
    assert (gpt2.pooling, gpt2.is_decoder, gpt2.padding_side) == ("last", True, "left")
    assert gpt2.architecture == "GPT2LMHeadModel"


def test_hub_id_resolves_to_installed_package(minilm_dir):
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == minilm_dir
    assert resolve_model(None) == minilm_dir
    info = model_info()
    assert (info.pooling, info.normalize, info.max_length) == ("mean", True, 256)
    assert info.pooling_source == "1_Pooling/config.json: pooling_mode_mean_tokens"


def test_unknown_model_messages(tmp_path):
    with pytest.raises(ModelNotFoundError, match="pass the path of a local model directory"):
        resolve_model("no-such-org/no-such-model-xyz")
    with pytest.raises(ModelNotFoundError, match="is not a directory"):
        resolve_model(str(tmp_path / "missing" / "model"))
    with pytest.raises(
        ModelNotFoundError, match=r"has none\. Pass the directory that holds config\.json"
    ):
        resolve_model(tmp_path)
