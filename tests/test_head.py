"""poolkit.head: the modules after pooling, read from folders sentence-transformers saved and
applied in NumPy and torch, against those modules' own forward."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from poolkit.errors import PipelineError
from poolkit.head import apply_head, read_head, torch_head

ACTIVATIONS = ["Tanh", "Identity", "ReLU", "GELU", "Sigmoid", "SiLU"]


def _save(tmp_path, modules):
    from sentence_transformers import SentenceTransformer

    from poolkit.model_folder import resolve_model

    dest = tmp_path / "model"
    # The pipeline is saved after MiniLM's transformer; only the modules after pooling matter.
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    st = SentenceTransformer(
        modules=[Transformer(str(resolve_model(None))), Pooling(384), *modules], device="cpu"
    )
    st.save(str(dest))
    return dest


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_dense_layer_norm_normalize_equal_their_modules(tmp_path, activation):
    from sentence_transformers.base.modules import Dense, Normalize
    from sentence_transformers.sentence_transformer.modules import LayerNorm

    torch.manual_seed(0)
    act = getattr(torch.nn, activation)()
    modules = [Dense(384, 48, activation_function=act), LayerNorm(48),
               Dense(48, 24, bias=False, use_residual=True), Normalize()]  # fmt: skip
    for p in modules[1].parameters():
        torch.nn.init.normal_(p)
    head = read_head(_save(tmp_path, modules))
    assert [s.kind for s in head.steps] == ["Dense", "LayerNorm", "Dense"] and head.normalize
    assert head.in_dim == 384 and head.out_dim(384) == 24
    x = torch.randn(5, 384)
    features = {"sentence_embedding": x.clone()}
    with torch.no_grad():
        for m in modules:
            features = m(features)
    ref = features["sentence_embedding"].numpy()
    np.testing.assert_allclose(apply_head(head, x.numpy()), ref, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(torch_head(head)(x).numpy(), ref, atol=1e-5)
        out = apply_head(head, x.double())  # follows the input's dtype
    assert out.dtype == torch.float64


def test_minilm_head_is_only_its_final_normalize():
    from poolkit.model_folder import resolve_model

    head = read_head(resolve_model(None))
    assert head.steps == () and head.normalize and head.refused == ()
    x = np.ones((2, 384), np.float32)
    np.testing.assert_array_equal(apply_head(head, x, normalize=False), x)


def test_untrusted_activation_and_token_level_modules_are_refused(tmp_path):
    from sentence_transformers.base.modules import Dense

    root = _save(tmp_path, [Dense(384, 8)])
    cfg = json.loads((root / "2_Dense" / "config.json").read_text())
    cfg["activation_function"] = "mypackage.Swish"
    (root / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    head = read_head(root)
    assert head.refused and "mypackage.Swish" in head.refused[0].status
    with pytest.raises(PipelineError, match=r"Dense \(2_Dense\).*mypackage.Swish.*'pooled'"):
        head.check(384, "mean", "m")
    cfg["activation_function"] = "torch.nn.modules.activation.Tanh"
    cfg["module_input_name"] = "token_embeddings"
    (root / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    assert "token_embeddings" in read_head(root).refused[0].status


def test_missing_weights_name_the_file(tmp_path):
    from sentence_transformers.base.modules import Dense

    root = _save(tmp_path, [Dense(384, 8)])
    (root / "2_Dense" / "model.safetensors").unlink()
    assert read_head(root, weights=False).steps[0].what == "384 -> 8, Tanh, bias"
    with pytest.raises(PipelineError, match=r"model\.safetensors or pytorch_model\.bin"):
        read_head(root)
