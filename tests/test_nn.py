"""poolkit.nn modules: the functional rules plus learned parts, also under torch.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference import sequence_reference, softmax_pool, span_reference

from poolkit.nn import AttentionPooler, Pooler, SpanExtractor, WordPooler


@pytest.fixture
def batch():
    torch.manual_seed(0)
    hidden = torch.randn(3, 6, 8)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1] * 6])
    return hidden, mask


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("grad", [False, True])
def test_pooler_matches_the_float64_reference(batch, check, grad):
    hidden, mask = batch
    pooler = Pooler("cls+mean+max", check=check)
    out = pooler(hidden.clone().requires_grad_(grad), mask).detach().numpy()
    h64, m = hidden.double().numpy(), mask.numpy()
    want = np.concatenate([sequence_reference(h64, m, s) for s in ("cls", "mean", "max")], -1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert pooler.output_dim(8) == 24
    assert "cls+mean+max" in repr(pooler)


def test_attention_pooler_softmax_over_real_tokens(batch):
    hidden, mask = batch
    pooler = AttentionPooler(8)
    out = pooler(hidden, mask)
    logits = pooler.scorer(hidden).squeeze(-1).detach().double().numpy()
    for b in range(3):
        real = mask[b].bool().numpy()
        want = softmax_pool(hidden[b].double().numpy()[real], logits[b][real])
        np.testing.assert_allclose(out[b].detach().numpy(), want, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert pooler.scorer.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"Expected `mask\[0\]` to be a row with a real token"):
        pooler(hidden[:1], torch.zeros(1, 6, dtype=torch.long))
    with pytest.raises(TypeError, match="Expected `mask` to be a bool or integer 0/1 array"):
        pooler(hidden[:1], torch.zeros(1, 6))


@pytest.mark.parametrize("check", [True, False])
def test_word_pooler_matches_the_reference(batch, check):
    hidden, _ = batch
    ids = [[None, 0, 0, 1, 2, None]] * 3
    out = WordPooler("mean", check=check)(hidden.requires_grad_(True), ids).detach().numpy()
    words = [(1, 2), (3, 3), (4, 4)]  # inclusive token spans of words 0, 1, 2
    for b in range(3):
        for w, (start, end) in enumerate(words):
            want = span_reference(hidden[b].detach().double().numpy(), start, end, "mean")
            np.testing.assert_allclose(out[b, w], want, rtol=1e-5, atol=1e-6)
    assert WordPooler("endpoints").output_dim(8) == 16
    with pytest.raises(ValueError, match="Expected `recipe` to be one of first"):
        WordPooler("avg")


def test_span_extractor_output_dim_contract_and_gradients(batch):
    hidden, mask = batch
    hidden = hidden.clone().requires_grad_(True)
    spans = torch.tensor([[[0, 1], [2, 3]], [[2, 5], [-1, -1]], [[0, 0], [1, 5]]])
    ext = SpanExtractor(8, "endpoints,attention", width_embedding_dim=5)
    out = ext(hidden, spans, mask)
    assert ext.output_dim == 2 * 8 + 8 + 5
    assert out.shape == (3, 2, ext.output_dim)
    h = hidden.detach().double().numpy()
    for b, row in enumerate(spans.tolist()):
        for k, (start, end) in enumerate(row):
            if start >= 0:
                want = span_reference(h[b], start, end, "endpoints")
                np.testing.assert_allclose(out[b, k, :16].detach().numpy(), want, atol=1e-6)
    np.testing.assert_array_equal(out[1, 1].detach().numpy(), 0)  # padded span
    # width 5 (span [1, 5]) falls in bucket 4; the embedding row is used as is
    torch.testing.assert_close(out[2, 1, -5:], ext.width_embedding.weight[4])
    out.sum().backward()
    assert ext.scorer.weight.grad.abs().sum() > 0
    assert ext.width_embedding.weight.grad.abs().sum() > 0
    assert hidden.grad.abs().sum() > 0


@pytest.mark.slow  # torch.compile: 15-35 s on 2 cores
def test_modules_work_under_torch_compile(batch):
    hidden, mask = batch
    spans = torch.tensor([[[0, 1]], [[2, 5]], [[1, 4]]])
    for module, args in [
        (Pooler("mean+max"), (hidden, mask)),
        (AttentionPooler(8), (hidden, mask)),
        (SpanExtractor(8, "x,y,attention", width_embedding_dim=3), (hidden, spans)),
    ]:
        eager = module(*args)
        compiled = torch.compile(module, backend="aot_eager")(*args)
        torch.testing.assert_close(compiled, eager)


@pytest.mark.parametrize("name", ["mean/256", "cls+mean/l2/128", "mean"])
def test_pooler_with_dims_is_embed_on_the_pooled_pipeline(name, minilm, minilm_dir):
    """#51: ``Pooler("mean/256")`` is ``embed(recipe="mean/256")`` (the pooled pipeline: no
    model module), on the model's own hidden states from transformers, gradients kept."""
    from transformers import AutoModel, AutoTokenizer

    import poolkit

    texts = ["A man is playing a guitar.", "hello", "Prices rose 3.5% in 2024."]
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    enc = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    hidden = AutoModel.from_pretrained(minilm_dir)(**enc).last_hidden_state
    pooler = Pooler(name)
    got = pooler(hidden, enc["attention_mask"])
    want = poolkit.embed(texts, minilm, name, pipeline="pooled")
    assert got.shape == want.shape == (3, pooler.output_dim(384))
    np.testing.assert_allclose(got.detach().numpy(), want, atol=2e-6)
    got.sum().backward()  # the truncation keeps the graph
    assert got.requires_grad


def test_pooler_refuses_a_precision_in_one_line():
    with pytest.raises(ValueError, match=r"/DIMS but no /PRECISION.*'mean/256/int8'"):
        Pooler("mean/256/int8")
