"""One prologue for every ``embed*`` entry point (``poolkit.embedding.resolve_request``).

A bad argument is refused before the model loads, by every entry point that takes it and
with the same message: the model given here does not exist, so an argument checked after
loading would surface as :class:`ModelNotFoundError` instead.
"""

from __future__ import annotations

import pytest

from poolkit import (
    ModelNotFoundError,
    PoolkitError,
    embed,
    embed_chunks,
    embed_spans,
    embed_tokens,
    embed_words,
)

MISSING = "/nonexistent/poolkit-model"

ENTRY = {
    "embed": lambda model, **kw: embed(["a b"], model, **kw),
    "embed_chunks": lambda model, **kw: embed_chunks(["a b"], model=model, **kw),
    "embed_tokens": lambda model, **kw: embed_tokens(["a b"], model, **kw),
    "embed_words": lambda model, **kw: embed_words([["a", "b"]], model, **kw),
    "embed_spans": lambda model, **kw: embed_spans(["a b"], [[(0, 1)]], model, **kw),
}
SEQUENCE = ("embed", "embed_chunks")
ONE_RECIPE = ("embed_words", "embed_spans")

# (keywords, the entry points that take them, the argument the message names)
BAD = [
    (dict(max_batch_tokens=0), tuple(ENTRY), "max_batch_tokens"),
    (dict(layers="bogus"), tuple(ENTRY), "layers"),
    (dict(recipe="nope"), SEQUENCE, "recipe"),
    (dict(pipeline="half"), SEQUENCE, "pipeline"),
    (dict(dims=0), SEQUENCE, "dims"),
    (dict(precision="int4"), SEQUENCE, "precision"),
    (dict(calibration="one text"), SEQUENCE, "calibration"),
    (dict(normalize="yes"), SEQUENCE, "normalize"),
    (dict(strategy="mean", recipe="mean"), SEQUENCE, "recipe"),
    (dict(strategy="max", recipe="mean"), ONE_RECIPE, "recipe"),
]


def _refusal(call):
    with pytest.raises(PoolkitError) as e:
        call()
    assert not isinstance(e.value, ModelNotFoundError), e.value
    return e.value


def test_a_missing_model_is_what_fails_when_the_arguments_are_good():
    for call in ENTRY.values():
        with pytest.raises(ModelNotFoundError):
            call(MISSING)


@pytest.mark.parametrize(("kwargs", "entries", "arg"), BAD, ids=[str(b[0]) for b in BAD])
def test_every_entry_point_refuses_an_argument_alike_before_the_model_loads(kwargs, entries,
                                                                            arg):  # fmt: skip
    messages = {}
    for name in entries:
        error = _refusal(lambda call=ENTRY[name]: call(MISSING, **kwargs))
        assert f"`{arg}`" in str(error), (name, str(error))
        messages[name] = (type(error), str(error))
    assert len(set(messages.values())) == 1, messages


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        (dict(chunks="tokens:0"), "SIZE >= 1"),
        (dict(chunks=3), "`chunks`"),
        (dict(late="yes"), "`late`"),
        (dict(stride=4), "`stride`"),
        (dict(late=True, strategy="cls"), "no [CLS]"),
        (dict(late=True, recipe=["mean", "last"]), "no [CLS]"),
    ],
)
def test_chunk_arguments_are_refused_before_the_model_loads(kwargs, says):
    error = _refusal(lambda: embed_chunks(["a b"], model=MISSING, **kwargs))
    assert says in str(error), str(error)


def test_inputs_and_spans_are_refused_before_the_model_loads():
    for call, arg in [
        (lambda: embed("a b", MISSING), "texts"),
        (lambda: embed_chunks(["a", " "], model=MISSING), "documents[1]"),
        (lambda: embed_words(["a b"], MISSING), "words[0]"),
        (lambda: embed_spans(["a b"], [[(0, 9)]], MISSING), "char_spans[0][0]"),
        (lambda: embed_spans(["a b"], [(0, 1)], MISSING), "char_spans[0]"),
    ]:
        assert f"`{arg}`" in str(_refusal(call))


def test_chunks_refuse_a_calibration_as_embed_does(minilm):
    for calibration in (["a", "b"], "one text"):
        seen = {str(_refusal(lambda c=calibration, f=f: f(c))) for f in (
            lambda c: embed(["a b"], minilm, calibration=c),
            lambda c: embed_chunks(["a b"], model=minilm, calibration=c),
            lambda c: embed_chunks(["a b"], model=minilm, calibration=c, late=True),
        )}  # fmt: skip
        assert len(seen) == 1, seen
    assert "got texts" in str(_refusal(lambda: embed_chunks(["a"], model=minilm,
                                                            calibration=["x"])))  # fmt: skip


@pytest.mark.parametrize("late", [False, True])
def test_no_documents_give_no_chunks(minilm, late):
    chunks, stats = embed_chunks([], model=minilm, late=late, return_stats=True)
    assert chunks == [] and stats.num_texts == 0
    assert embed([], minilm).shape == (0, 384)
