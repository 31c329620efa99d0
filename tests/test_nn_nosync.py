"""The default checks of the vectorised path never wait for the host.

PyTorch's ``meta`` device holds shapes without data, so any read back to the host
(``.item()``, ``bool(tensor)``, ``.cpu()``) raises "Cannot copy out of meta tensor": a
default forward + backward that passes there cannot have synchronised. ``check="full"``
reads its flags back, and fails there, which shows that the device catches a read. The
mode that checks exactly still raises the per-row messages for bad input, and the
asynchronous assert carries a message that names the problem.
"""

from __future__ import annotations

import pytest
import torch

from poolkit import sequence_embedding, span_embeddings, word_embeddings
from poolkit.nn import AttentionPooler, Pooler, SpanExtractor, WordPooler

B, L, H, S, W = 3, 7, 8, 2, 4
META = torch.device("meta")


def meta_inputs():
    """Hidden states that require grad, a 0/1 int mask, spans, word ids: all on ``meta``."""
    hidden = torch.empty(B, L, H, device=META, requires_grad=True)
    mask = torch.empty(B, L, dtype=torch.long, device=META)
    spans = torch.empty(B, S, 2, dtype=torch.long, device=META)
    word_ids = torch.empty(B, L, dtype=torch.long, device=META)
    return hidden, mask, spans, word_ids


def module_calls(check):
    """(name, module, call) for every nn module in the given check mode."""
    return [
        ("Pooler mean", Pooler("mean", check=check), lambda m, h, mk, sp, w: m(h, mk)),
        ("Pooler max", Pooler("max", check=check), lambda m, h, mk, sp, w: m(h, mk)),
        (
            "Pooler every strategy, special tokens dropped",
            Pooler(
                "cls+mean+max+min+sum+mean_sqrt_len+weighted_mean+last",
                exclude_special=True,
                check=check,
            ),
            lambda m, h, mk, sp, w: m(h, mk, special_tokens_mask=mk),
        ),
        ("AttentionPooler", AttentionPooler(H, check=check), lambda m, h, mk, sp, w: m(h, mk)),
        (
            "WordPooler",
            WordPooler("mean", check=check),
            lambda m, h, mk, sp, w: m(h, w, num_words=W),
        ),
        (
            "SpanExtractor",
            SpanExtractor(H, "endpoints,mean,max,attention", width_embedding_dim=3, check=check),
            lambda m, h, mk, sp, w: m(h, sp, mk, span_mask=mk[:, :S]),
        ),
    ]


FUNCTIONAL = {
    "sequence_embedding": lambda h, mk, sp, w: sequence_embedding(h, mk, "mean+max+cls"),
    "span_embeddings": lambda h, mk, sp, w: span_embeddings(
        h, sp, "endpoints,mean,max,attention", mask=mk, width_buckets="log"
    ),
    "word_embeddings": lambda h, mk, sp, w: word_embeddings(h, w, "max", num_words=W),
}


@pytest.mark.parametrize("check", [True, "async"])
@pytest.mark.parametrize("case", range(len(module_calls(True))))
def test_default_module_forward_backward_never_reads_the_device(case, check):
    name, module, call = module_calls(check)[case]
    hidden, mask, spans, word_ids = meta_inputs()
    out = call(module.to(META), hidden, mask, spans, word_ids)
    assert out.device == META, name
    out.sum().backward()
    assert hidden.grad is not None and hidden.grad.shape == hidden.shape, name
    for param in module.parameters():
        assert param.grad is not None and param.grad.device == META, name


@pytest.mark.parametrize("name", list(FUNCTIONAL))
def test_default_functional_forward_backward_never_reads_the_device(name):
    hidden, mask, spans, word_ids = meta_inputs()
    out = FUNCTIONAL[name](hidden, mask, spans, word_ids)
    assert out.device == META and out.shape[0] == B
    out.sum().backward()
    assert hidden.grad is not None and hidden.grad.shape == hidden.shape


@pytest.mark.parametrize("case", range(len(module_calls(True))))
def test_full_mode_reads_back_and_so_fails_on_meta(case):
    """The meta device catches a host read: the mode that reads its flags fails there."""
    _, module, call = module_calls("full")[case]
    hidden, mask, spans, word_ids = meta_inputs()
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        call(module.to(META), hidden, mask, spans, word_ids)


# -- the exact messages: in "full" mode on every device, by default on CPU tensors


def cpu_batch():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, H, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    return hidden, mask


EMPTY_ROW = r"Expected `mask` to be a real token in every row \(something to pool\), but got row\(s\) 1 with no real token \(all padding\)"
NOT_01 = r"Expected `mask` to be 0/1 values, but got value 2 at index \(0, 1\)"
REVERSED = r"Expected `spans\[1\]\[0\]` to be a valid span, but got \[3, 1\], which has start > end"
OVER_PADDING = (
    r"Expected `spans\[0\]\[0\]` to be a valid span, but got \[1, 4\], which covers padding"
)

BAD_MODULE_CALLS = [
    (Pooler, ("mean",), lambda m, h, mk: m(h, torch.tensor([[1, 1, 0, 0, 0], [0] * 5])), EMPTY_ROW),
    (Pooler, ("max",), lambda m, h, mk: m(h, torch.tensor([[1, 2, 0, 0, 0], [1] * 5])), NOT_01),
    (
        AttentionPooler,
        (H,),
        lambda m, h, mk: m(h, torch.tensor([[1, 1, 0, 0, 0], [0] * 5])),
        r"Expected `mask\[1\]` to be a row with a real token",
    ),
    (
        SpanExtractor,
        (H, "endpoints,attention"),
        lambda m, h, mk: m(h, torch.tensor([[[0, 1]], [[3, 1]]]), mk),
        REVERSED,
    ),
    (
        SpanExtractor,
        (H, "mean"),
        lambda m, h, mk: m(h, torch.tensor([[[1, 4]], [[0, 0]]]), mk),
        OVER_PADDING,
    ),
    (
        WordPooler,
        ("first",),
        lambda m, h, mk: m(h, torch.tensor([[0, 1, 0, -1, -1]] * 2), num_words=2),
        "but got those of row 0, word 0 at positions",
    ),
]


@pytest.mark.parametrize("check", [True, "full"])
@pytest.mark.parametrize("case", range(len(BAD_MODULE_CALLS)))
def test_checking_modes_raise_the_exact_message(case, check):
    cls, args, call, message = BAD_MODULE_CALLS[case]
    hidden, mask = cpu_batch()
    module = cls(*args, check=check)
    with pytest.raises(ValueError, match=message):
        call(module, hidden, mask)


@pytest.mark.parametrize("check", [True, "full"])
def test_functional_checking_modes_raise_the_exact_message(check):
    hidden, _ = cpu_batch()
    with pytest.raises(ValueError, match=EMPTY_ROW):
        sequence_embedding(hidden, torch.tensor([[1, 0, 0, 0, 0], [0] * 5]), check=check)
    with pytest.raises(ValueError, match=REVERSED):
        span_embeddings(hidden, torch.tensor([[[0, 0]], [[3, 1]]]), check=check)
    with pytest.raises(ValueError, match="Expected `word_ids` to be adjacent sub-tokens"):
        word_embeddings(hidden, [[0, 1, 0, None, None]] * 2, num_words=2, check=check)


def test_check_false_raises_nothing_and_gives_zeros_for_empty_rows():
    hidden, _ = cpu_batch()
    out = Pooler("mean", check=False)(hidden, torch.tensor([[1, 1, 0, 0, 0], [0] * 5]))
    assert torch.equal(out[1], torch.zeros(H))


@pytest.mark.slow  # torch.compile
def test_async_assert_names_the_problem():
    """Under torch.compile the default mode asserts on the device even for CPU tensors;
    the message names the problem and how to get the exact error."""
    hidden, _ = cpu_batch()
    compiled = torch.compile(Pooler("mean"), backend="aot_eager", fullgraph=True)
    good = compiled(hidden, torch.tensor([[1, 1, 0, 0, 0], [1] * 5]))
    assert good.shape == (2, H)
    with pytest.raises(RuntimeError, match=r"a row of `mask` has no real token\).*check='full'"):
        compiled(hidden, torch.tensor([[1, 1, 0, 0, 0], [0] * 5]))


def test_unknown_check_mode_is_refused():
    with pytest.raises(ValueError, match="Expected `check` to be True or 'async'"):
        Pooler("mean", check="sometimes")
    with pytest.raises(ValueError, match="Expected `check` to be True or 'async'"):
        sequence_embedding(torch.zeros(2, 3), check="yes")


@pytest.mark.parametrize(
    ("values", "finite"),
    [
        ([1.0, -2.0], True),
        ([3.0e38, 3.0e38, 3.0e38], True),  # a float32 sum would overflow; float64 does not
        ([1.0, float("nan")], False),
        ([float("inf"), 1.0], False),
        ([float("-inf"), 1.0], False),
        ([float("inf"), float("-inf")], False),
    ],
)
def test_all_finite_flag(values, finite):
    from poolkit._arrays import all_finite

    for dtype in (torch.float32, torch.float64):
        assert bool(all_finite(torch.tensor(values, dtype=dtype).reshape(-1, 1))) is finite
