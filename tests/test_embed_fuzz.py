"""Fuzz ``embed``, ``embed_tokens``, ``embed_words`` and ``embed_spans`` with hostile input.

Every call either returns the right, finite result (checked against a plain Hugging Face
forward pass of each text alone, tests/text_reference.py) or raises ValueError/TypeError
whose message names the offending argument in backticks. Nothing else may escape.
The core functions are fuzzed in test_fuzz_core.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolkit import embed, embed_spans, embed_tokens, embed_words

pytestmark = pytest.mark.slow

# Any Unicode scalar value (no lone surrogates): controls, combining marks, RTL, CJK...
TEXT = st.text(st.characters(codec="utf-8"), max_size=24)
WORD = st.text(st.characters(codec="utf-8"), max_size=8)
NOT_A_TEXT = st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=4),
                       st.lists(TEXT, max_size=2))  # fmt: skip
LONE_SURROGATE = st.sampled_from(["\ud800", "ok \udfff ok", "\udc80"])


@pytest.fixture(scope="module")
def ref(minilm_dir):
    from text_reference import Reference

    return Reference(minilm_dir)


def outcome(call, bad: list[str]):
    """The result of ``call()``, or None after checking that the error names a bad argument."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation warnings are tested elsewhere
        try:
            return call()
        except (ValueError, TypeError) as e:
            message = str(e)
            assert bad, f"valid input was refused: {type(e).__name__}: {message}"
            assert any(f"`{name}" in message for name in bad), (bad, message)
            return None


@st.composite
def texts_arg(draw: st.DrawFn) -> tuple[object, list[str]]:
    """(texts, names of bad arguments) - valid lists most of the time."""
    kind = draw(st.integers(0, 9))
    if kind < 6:
        return draw(st.lists(TEXT, max_size=4)), []
    if kind == 6:
        return draw(st.one_of(st.none(), st.integers(), TEXT.filter(bool))), ["texts"]
    good = draw(st.lists(TEXT, max_size=2))
    bad = draw(LONE_SURROGATE if kind == 7 else NOT_A_TEXT)
    at = draw(st.integers(0, len(good)))
    return [*good[:at], bad, *good[at:]], ["texts"]


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=0)


@settings(max_examples=30)
@given(
    arg=texts_arg(),
    strategy=st.sampled_from([None, "mean", ["mean", "cls"], "bogus", 7, [], ["mean", "mean"]]),
    normalize=st.sampled_from([None, True, False]),
    budget=st.sampled_from([None, 1, 9, 0, -3]),
)
def test_embed(minilm, ref, arg, strategy, normalize, budget):
    texts, bad = arg
    if strategy in ("bogus", 7, [], ["mean", "mean"]):
        bad = [*bad, "recipe"]  # the third argument (it was `strategy`)
    if budget is not None and budget < 1:
        bad = [*bad, "max_batch_tokens"]
    got = outcome(
        lambda: embed(texts, minilm, strategy, normalize=normalize, max_batch_tokens=budget), bad
    )
    if got is None:
        return
    assert not bad, f"accepted although {bad} were bad"
    assert isinstance(texts, list | tuple)
    unit = normalize is not False
    for name in ["mean", "cls"] if isinstance(strategy, list) else ["mean"]:
        vectors = got[name] if isinstance(strategy, list) else got
        assert vectors.shape == (len(texts), 384)
        for i, text in enumerate(texts):
            hidden = ref.encode(text)[0]
            want = hidden.mean(axis=0) if name == "mean" else hidden[0]
            close(vectors[i], want / np.linalg.norm(want) if unit else want)


@settings(max_examples=25)
@given(arg=texts_arg())
def test_embed_tokens(minilm, ref, arg):
    texts, bad = arg
    got = outcome(lambda: embed_tokens(texts, minilm), bad)
    if got is None:
        return
    assert not bad, f"accepted although {bad} were bad"
    assert len(got) == len(texts)
    for text, tv in zip(texts, got, strict=True):
        tokens, offsets, vectors = ref.tokens(text)
        assert tv.tokens == tokens
        np.testing.assert_array_equal(tv.offsets, offsets.reshape(-1, 2))
        assert tv.vectors.shape == (len(tokens), 384)
        close(tv.vectors, vectors.reshape(-1, 384))
        for a, b in tv.offsets:
            assert 0 <= a < b <= len(text) and text[a:b].strip()


@st.composite
def words_arg(draw: st.DrawFn) -> tuple[object, list[str]]:
    kind = draw(st.integers(0, 9))
    if kind < 6:
        return draw(st.lists(st.lists(WORD, max_size=4), max_size=3)), []
    hostile = [None, 5, "a plain string", ["one text, not a list of word lists"],
               [["ok", None]], [["ok", 3]], [[["nested"]]], [["ok"], "abc"]]  # fmt: skip
    return draw(st.sampled_from(hostile)), ["words"]


@settings(max_examples=25)
@given(arg=words_arg(), strategy=st.sampled_from(["first", "first", "bogus"]))
def test_embed_words(minilm, ref, arg, strategy):
    words, bad = arg
    if strategy == "bogus":
        bad = [*bad, "recipe"]
    got = outcome(lambda: embed_words(words, minilm, strategy), bad)
    if got is None:
        return
    assert not bad, f"accepted although {bad} were bad"
    assert len(got) == len(words)
    for ws, vectors in zip(words, got, strict=True):
        assert vectors.shape == (len(ws), 384)
        if ws:
            close(vectors, ref.words_first(tuple(ws)))


@st.composite
def spans_arg(draw: st.DrawFn) -> tuple[list[str], object, list[str]]:
    """(texts, char_spans, bad argument names)."""
    texts = draw(st.lists(TEXT, min_size=1, max_size=3))
    spans: list[object] = []
    bad: list[str] = []
    for text in texts:
        n = len(text)
        pairs = draw(
            st.lists(st.tuples(st.integers(-2, n + 2), st.integers(-2, n + 2)), max_size=3)
        )
        if any(not 0 <= a < b <= n for a, b in pairs):
            bad = ["char_spans"]
        spans.append(pairs)
    hostility = draw(st.integers(0, 14))
    if hostility == 1:
        spans = spans[:-1]  # one list of spans missing
    elif hostility == 2:
        spans[0] = (0, 1)  # a bare span where a list of spans belongs
    elif hostility == 3:
        spans[0] = [(0, 1, 2)]
    elif hostility == 4:
        spans[0] = [(0.5, 1)]
    elif hostility == 5:
        spans[0] = [(0, 2**70)]
    elif hostility == 6:
        spans[0] = None
    elif hostility == 7:
        spans[0] = ["ab"]
    elif hostility == 8:
        spans[0] = [[(0, 1)]]
    elif hostility == 9:
        spans = None
    if 1 <= hostility <= 9:
        bad = ["char_spans"]
    return texts, spans, bad


@settings(max_examples=30)
@given(arg=spans_arg())
def test_embed_spans(minilm, ref, arg):
    texts, spans, bad = arg
    if not bad:
        # A well-formed span over nothing but whitespace/ignored characters must be refused.
        for text, pairs in zip(texts, spans, strict=True):
            if any(ref.span_tokens(text, a, b) is None for a, b in pairs):
                bad = ["char_spans"]
    got = outcome(lambda: embed_spans(texts, spans, minilm), bad)
    if got is None:
        return
    assert not bad, f"{spans!r} was accepted although {bad} were bad"
    for text, pairs, vectors in zip(texts, spans, got, strict=True):
        assert vectors.shape == (len(pairs), 768)
        for (a, b), vector in zip(pairs, vectors, strict=True):
            close(vector, ref.endpoints(text, a, b))


def test_huge_strings_are_truncated_not_fatal(minilm, ref):
    huge = "The quick brown fox. " * 50_000  # ~1 MB
    with pytest.warns(UserWarning, match="1 of 2 texts were longer than 256 tokens"):
        got = embed([huge, "short"], minilm)
    close(got[0], ref.sentence(huge))
    with pytest.warns(UserWarning, match="truncated"):
        (tv,) = embed_tokens([huge], minilm)
    assert len(tv.tokens) == 254 and tv.offsets[-1, 1] < 2000
