"""The vectorised torch path (grad, accelerator, bfloat16) against the per-row path.

Both paths are checked against the float64 references in ``reference.py`` and against
each other, gradients included; ``gradcheck`` runs on every strategy of both paths. The
vectorised path must dispatch the same number of torch operations for B=4 and B=256
(nothing loops over rows), read nothing back to the host with ``check=False``, read
its flags back once with ``check="full"``, and compile with ``torch.compile(fullgraph=True)``
(``tests/test_nn_nosync.py`` runs the default checks on the meta device).
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest
import torch
from reference import sequence_reference, softmax_pool, span_reference
from torch.utils._python_dispatch import TorchDispatchMode

import poolkit.sequence
import poolkit.spans
import poolkit.words
from poolkit import SEQUENCE_STRATEGIES, WORD_STRATEGIES
from poolkit import sequence_embedding as seq
from poolkit import span_embeddings as spans_fn
from poolkit import word_embeddings as words_fn
from poolkit.nn import AttentionPooler, Pooler, SpanExtractor, WordPooler

SPAN_TERMS = ["endpoints", "diff_sum", "mean", "max", "x,y,x*y", "x-y"]


@pytest.fixture(params=["dense", "rows"])
def path(request, monkeypatch):
    """Force one path: "dense" (vectorised) or "rows" (the per-row loop, in torch)."""
    dense = request.param == "dense"
    for module in (poolkit.sequence, poolkit.spans, poolkit.words):
        monkeypatch.setattr(module, "dense_path", lambda *a, dense=dense: dense)
    return request.param


def sequence_batch(seed: int, b: int = 5, length: int = 9, hid: int = 4):
    """float64 hidden, int mask (left, right and hole-y rows), special-token mask."""
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((b, length, hid))
    lengths = rng.integers(3, length + 1, size=b)  # a token left after [CLS] ... [SEP]
    pos = np.arange(length)[None, :]
    right, left = pos < lengths[:, None], pos >= (length - lengths)[:, None]
    mask = np.where(rng.random(b)[:, None] < 0.5, right, left)
    special = np.zeros_like(mask)
    for i in range(b):
        real = np.flatnonzero(mask[i])
        special[i, real[0]] = special[i, real[-1]] = True
        if len(real) > 3:  # a dropped token in the middle: the kept tokens have a hole
            special[i, real[len(real) // 2]] = True
    return hidden, mask.astype(np.int64), special


def span_batch(seed: int, b: int = 3, length: int = 11, hid: int = 4, n_spans: int = 5):
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((b, length, hid))
    lengths = rng.integers(1, length + 1, size=b)
    mask = np.arange(length)[None, :] < lengths[:, None]
    spans = np.full((b, n_spans, 2), -1, np.int64)
    for i in range(b):
        for s in range(n_spans):
            if rng.random() < 0.8:
                lo = rng.integers(0, lengths[i])
                spans[i, s] = lo, rng.integers(lo, lengths[i])
    return hidden, mask, spans


def run_both(fn, hidden: np.ndarray, *extra: torch.Tensor):
    """Output and gradients (w.r.t. hidden and ``extra``) of ``fn`` on float64 tensors."""
    h = torch.from_numpy(hidden).requires_grad_(True)
    out = fn(h, *extra)
    weights = torch.from_numpy(np.random.default_rng(1).standard_normal(tuple(out.shape)))
    grads = torch.autograd.grad((out * weights).sum(), [h, *extra], allow_unused=True)
    return out.detach().numpy(), [None if g is None else g.numpy() for g in grads]


@pytest.mark.parametrize("strategy", SEQUENCE_STRATEGIES)
@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_sequence_paths_match_reference_and_each_other(strategy, exclude, seed, monkeypatch):
    hidden, mask, special = sequence_batch(seed)
    expected = sequence_reference(hidden, mask, strategy, special if exclude else None)
    results = {}
    for dense in (True, False):
        monkeypatch.setattr(poolkit.sequence, "dense_path", lambda *a, d=dense: d)
        results[dense] = run_both(
            lambda h: seq(h, mask, strategy, special_tokens_mask=special, exclude_special=exclude),
            hidden,
        )
        np.testing.assert_allclose(results[dense][0], expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(results[True][1][0], results[False][1][0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("strategy", SPAN_TERMS)
@pytest.mark.parametrize("seed", range(4))
def test_span_paths_match_reference_and_each_other(strategy, seed, monkeypatch):
    hidden, mask, spans = span_batch(seed)
    results = {}
    for dense in (True, False):
        monkeypatch.setattr(poolkit.spans, "dense_path", lambda *a, d=dense: d)
        out, grads = run_both(lambda h: spans_fn(h, spans, strategy, mask=mask), hidden)
        for b in range(spans.shape[0]):
            for s in range(spans.shape[1]):
                start, end = spans[b, s]
                if start < 0:
                    np.testing.assert_array_equal(out[b, s], 0)
                else:
                    want = span_reference(hidden[b], start, end, strategy)
                    np.testing.assert_allclose(out[b, s], want, rtol=1e-10, atol=1e-12)
        results[dense] = grads
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("with_scores", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_span_attention_paths_match_reference_and_each_other(with_scores, seed, monkeypatch):
    hidden, mask, spans = span_batch(seed)
    logits = np.random.default_rng(seed + 7).standard_normal(hidden.shape[:2])
    scores = torch.from_numpy(logits).requires_grad_(True)
    results = {}
    for dense in (True, False):
        monkeypatch.setattr(poolkit.spans, "dense_path", lambda *a, d=dense: d)

        def call(h, *sc):
            return spans_fn(h, spans, "attention", mask=mask, scores=sc[0] if sc else None)

        out, grads = run_both(call, hidden, *([scores] if with_scores else []))
        for b in range(spans.shape[0]):
            for s in range(spans.shape[1]):
                start, end = spans[b, s]
                if start < 0:
                    continue
                tokens = hidden[b, start : end + 1]
                span_logits = (
                    logits[b, start : end + 1]
                    if with_scores
                    else tokens @ tokens.mean(0) / np.sqrt(hidden.shape[-1])
                )
                want = softmax_pool(tokens, span_logits)
                np.testing.assert_allclose(out[b, s], want, rtol=1e-10, atol=1e-12)
        results[dense] = grads
    for a, c in zip(results[True], results[False], strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("strategy", list(WORD_STRATEGIES))
def test_word_paths_match_each_other(strategy, monkeypatch):
    hidden = np.random.default_rng(3).standard_normal((2, 7, 3))
    ids = [[None, 0, 0, 1, 2, 2, None], [None, 0, 1, 1, 1, None, None]]
    results = {}
    for dense in (True, False):
        monkeypatch.setattr(poolkit.words, "dense_path", lambda *a, d=dense: d)
        results[dense] = run_both(lambda h: words_fn(h, ids, strategy, num_words=4), hidden)
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(results[True][1][0], results[False][1][0], rtol=1e-12, atol=1e-12)
    # word 1 of row 1 is tokens 2..4; word 3 has no sub-token: zeros
    picks = {"first": [2], "last": [4], "endpoints": [2, 4]}
    if strategy in picks:
        want = np.concatenate([hidden[1, i] for i in picks[strategy]])
    else:
        want = span_reference(hidden[1], 2, 4, strategy)
    np.testing.assert_allclose(results[True][0][1, 1], want, rtol=1e-12)
    np.testing.assert_array_equal(results[True][0][:, 3], 0)


# -- gradcheck: float64 finite differences against autograd, every strategy, both paths


@pytest.mark.parametrize("strategy", SEQUENCE_STRATEGIES)
def test_gradcheck_sequence(strategy, path):
    hidden, mask, special = sequence_batch(0, b=3, length=6, hid=3)
    h = torch.from_numpy(hidden).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: seq(x, mask, strategy), (h,))
    assert torch.autograd.gradcheck(
        lambda x: seq(x, mask, strategy, special_tokens_mask=special, exclude_special=True),
        (h,),
    )


@pytest.mark.parametrize("strategy", [*SPAN_TERMS, "attention", "x/y", "y+x,x*y"])
def test_gradcheck_spans(strategy, path):
    hidden, mask, spans = span_batch(1, b=2, length=7, hid=3, n_spans=4)
    if "/" in strategy:
        hidden = hidden + 3.0  # keep the divisor away from zero
    h = torch.from_numpy(hidden).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: spans_fn(x, spans, strategy, mask=mask), (h,))


def test_gradcheck_span_attention_scores(path):
    hidden, mask, spans = span_batch(2, b=2, length=7, hid=3, n_spans=4)
    h = torch.from_numpy(hidden).requires_grad_(True)
    s = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 7))).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x, sc: spans_fn(x, spans, "attention", mask=mask, scores=sc), (h, s)
    )


@pytest.mark.parametrize("strategy", list(WORD_STRATEGIES))
def test_gradcheck_words(strategy, path):
    h = torch.from_numpy(np.random.default_rng(4).standard_normal((2, 7, 3)))
    ids = [[None, 0, 0, 1, 2, 2, None], [None, 0, 1, 1, 1, None, None]]
    assert torch.autograd.gradcheck(lambda x: words_fn(x, ids, strategy), (h.requires_grad_(True),))


# -- errors: the vectorised path raises what the per-row path raises


def _message(call) -> str:
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    return f"{type(info.value).__name__}: {info.value}"


BAD_CALLS = {
    "mask not 0/1": lambda h: seq(h, torch.tensor([[1, 2, 1, 0]] * 2), "mean"),
    "empty row": lambda h: seq(h, torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]]), "max"),
    "empty after special": lambda h: seq(
        h,
        torch.tensor([[1, 1, 0, 0]] * 2),
        "mean",
        special_tokens_mask=torch.tensor([[1, 1, 0, 0]] * 2),
        exclude_special=True,
    ),
    "nan in a real token": lambda h: seq(
        h * torch.tensor([1.0, float("nan"), 1, 1])[:, None], None
    ),
    "nan in a span": lambda h: spans_fn(
        h * torch.tensor([1.0, float("nan"), 1, 1])[:, None], torch.tensor([[[1, 2]]] * 2), "mean"
    ),
    "span reversed": lambda h: spans_fn(h, torch.tensor([[[2, 1]], [[0, 0]]]), "mean"),
    "span past the end": lambda h: spans_fn(h, torch.tensor([[[0, 1]], [[1, 4]]]), "x"),
    "span over padding": lambda h: spans_fn(
        h, torch.tensor([[[0, 3]], [[0, 0]]]), "max", mask=torch.tensor([[1, 1, 1, 0]] * 2)
    ),
    "span float": lambda h: spans_fn(h, torch.tensor([[[0.0, 1.0]]] * 2), "x"),
    "words not adjacent": lambda h: words_fn(h, [[0, 1, 0, -1]] * 2, "mean"),
    "num_words too small": lambda h: words_fn(h, [[0, 1, 2, -1]] * 2, "mean", num_words=2),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_errors_are_the_per_row_errors(case, monkeypatch):
    messages = {}
    for dense in (True, False):
        for module in (poolkit.sequence, poolkit.spans, poolkit.words):
            monkeypatch.setattr(module, "dense_path", lambda *a, d=dense: d)
        h = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
        messages[dense] = _message(lambda h=h: BAD_CALLS[case](h))
    assert messages[True] == messages[False]


# -- op counts: one forward + backward dispatches as many ops for B=4 as for B=256


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def module_cases(b: int, check: bool = True):
    """(module, args, kwargs) for every nn module on a random batch of ``b`` rows."""
    gen = torch.Generator().manual_seed(b)
    length, hid = 12, 8
    hidden = torch.randn(b, length, hid, generator=gen)
    lengths = torch.randint(4, length + 1, (b,), generator=gen)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    widths = torch.randint(1, 4, (b, 3), generator=gen)
    starts = (torch.rand(b, 3, generator=gen) * (lengths[:, None] - widths + 1)).long()
    spans = torch.stack([starts, starts + widths - 1], -1)
    spans[0, 0] = -1  # one padded span
    word_ids = torch.tensor([-1, 0, 0, 1, 2, 2, 3, -1] + [-1] * (length - 8)).expand(b, -1)
    torch.manual_seed(0)
    every = "+".join(SEQUENCE_STRATEGIES)
    return hidden, [
        (Pooler(every, check=check), (mask,), {}),
        (AttentionPooler(hid, check=check), (mask,), {}),
        (WordPooler("max", check=check), (word_ids,), {"num_words": 4}),
        (
            SpanExtractor(hid, "endpoints,mean,max,attention", width_embedding_dim=3, check=check),
            (spans,),
            {"mask": mask},
        ),
    ]


def count_ops(b: int, check: bool) -> list[Counter[str]]:
    hidden, cases = module_cases(b, check)
    counts = []
    for module, args, kwargs in cases:
        h = hidden.clone().requires_grad_(True)
        module(h, *args, **kwargs)  # first use copies the width-bucket bounds to the device
        with OpCounter() as counter:
            module(h, *args, **kwargs).sum().backward()
        assert h.grad is not None and h.grad.abs().sum() > 0
        counts.append(counter.ops)
    return counts


@pytest.mark.parametrize("check", [True, "full", False])
def test_op_count_does_not_grow_with_the_batch(check):
    small, large = count_ops(4, check), count_ops(256, check)
    for a, c in zip(small, large, strict=True):
        assert sum(a.values()) > 10  # the counter saw the work
        assert a == c


def test_check_false_never_reads_data_back():
    for counts in count_ops(16, check=False):
        # .item(), bool(tensor), .tolist() dispatch _local_scalar_dense; nonzero syncs too
        assert not {"aten._local_scalar_dense", "aten.nonzero"} & set(counts), counts


def test_full_mode_reads_back_once():
    unchecked = count_ops(16, check=False)
    for counts, plain in zip(count_ops(16, check="full"), unchecked, strict=True):
        assert counts["aten._local_scalar_dense"] == 0  # one .cpu().tolist() of all flags
        assert counts["aten.stack"] == plain["aten.stack"] + 1


def test_default_mode_reads_only_its_flags_on_the_cpu():
    """CPU tensors: each 0-d flag is read where it lies (host memory, nothing to wait
    for); no flags are stacked and copied, nothing is searched for the bad row."""
    unchecked = count_ops(16, check=False)
    for counts, plain in zip(count_ops(16, check=True), unchecked, strict=True):
        assert 1 <= counts["aten._local_scalar_dense"] <= 5
        assert counts["aten.stack"] == plain["aten.stack"]
        assert "aten.nonzero" not in counts


# -- torch.compile(fullgraph=True): no graph breaks, same results, gradients flow


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize("check", [False, True])
def test_modules_compile_without_graph_breaks(check):
    """check=False has no checks; the default's become device asserts, which trace."""
    hidden, cases = module_cases(3, check=check)
    for module, args, kwargs in cases:
        eager_h = hidden.clone().requires_grad_(True)
        eager = module(eager_h, *args, **kwargs)
        eager.sum().backward()
        compiled_h = hidden.clone().requires_grad_(True)
        compiled = torch.compile(module, backend="aot_eager", fullgraph=True)
        got = compiled(compiled_h, *args, **kwargs)
        got.sum().backward()
        torch.testing.assert_close(got, eager)
        torch.testing.assert_close(compiled_h.grad, eager_h.grad)


# -- dtypes and accelerators


def test_bfloat16_takes_the_vectorised_path_and_matches_float32():
    hidden, mask, _ = sequence_batch(5)
    h32 = torch.from_numpy(hidden).float()
    for strategy in SEQUENCE_STRATEGIES:
        got = seq(h32.bfloat16(), mask, strategy)
        want = seq(h32.bfloat16().float(), mask, strategy)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    hidden, mask, spans = span_batch(6)
    h = torch.from_numpy(hidden).float()
    for strategy in [*SPAN_TERMS, "attention"]:
        torch.testing.assert_close(
            spans_fn(h.cuda(), torch.from_numpy(spans).cuda(), strategy).cpu(),
            spans_fn(h, spans, strategy),
        )
    for strategy in SEQUENCE_STRATEGIES:
        torch.testing.assert_close(
            seq(h.cuda(), torch.from_numpy(mask).cuda(), strategy).cpu(), seq(h, mask, strategy)
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("check", [False, True])
def test_cuda_default_and_check_false_never_synchronise(check):
    hidden, cases = module_cases(8, check=check)
    for module, args, kwargs in cases:
        module.cuda()
        args = tuple(a.cuda() for a in args)
        kwargs = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        h = hidden.cuda().requires_grad_(True)
        module(h, *args, **kwargs).sum().backward()  # lazy CUDA initialisation first
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            module(h, *args, **kwargs).sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        # the exactly checked path gives the same on the GPU as the per-row path on the CPU
        module.check = "full"
        on_cpu = copy.deepcopy(module).cpu()
        with torch.no_grad():
            want = on_cpu(
                hidden, *(a.cpu() for a in args), **{k: _cpu(v) for k, v in kwargs.items()}
            )
            got = module(h, *args, **kwargs).cpu()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("strategy", ["mean", "max", "attention", "endpoints"])
def test_non_finite_padding_never_reaches_a_span(strategy, monkeypatch):
    """Prefix sums and the attention matmul read whole rows; a NaN/inf outside every span
    sends the call to the per-row path, so the result is what it always was."""
    hidden, mask, spans = span_batch(8)
    poisoned = hidden.copy()
    poisoned[~mask] = np.nan
    poisoned[0, :, 0] = np.where(mask[0], poisoned[0, :, 0], np.inf)
    want = spans_fn(hidden, spans, strategy, mask=mask)
    h = torch.from_numpy(poisoned).requires_grad_(True)
    got = spans_fn(h, spans, strategy, mask=mask)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    got.sum().backward()
    assert torch.isfinite(h.grad).all()
