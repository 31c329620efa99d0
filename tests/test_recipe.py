"""poolkit.Recipe: parse / str round trip, JSON, output widths, one-line errors."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import poolkit
from poolkit import Recipe
from poolkit.layers import LAYER_PRESETS
from poolkit.recipe import RecipeError
from poolkit.sequence import SEQUENCE_STRATEGIES
from poolkit.words import WORD_STRATEGIES

PLAIN = ["mean", "cls", "cls+mean", "mean+max", "mean_no_special", "cls,mean", "MEAN"]


@pytest.mark.parametrize("name", PLAIN)
def test_plain_strategy_names_parse_to_sequence_recipes(name: str) -> None:
    r = Recipe.parse(name)
    assert r.level == "sequence" and r.layers is None and r.normalize is None
    assert str(r) == name.lower().replace(",", "+")


def test_shorthands_build_the_same_value() -> None:
    assert Recipe("mean", exclude_special=True) == Recipe.parse("mean_no_special")
    assert Recipe.parse("mean_no_special").exclude_special is True
    # A mixed concatenation drops specials in one part only.
    mixed = Recipe.parse("cls+mean_no_special")
    assert mixed.exclude_special is False
    assert mixed.parts == (("cls", False), ("mean", True))
    assert Recipe("mean", layers="last4") == Recipe.parse("mean@last4")
    assert Recipe("mean", layers=-2) == Recipe.parse("mean@-2")
    assert Recipe("mean", layers=[-1, -2], layer_how="concat") == Recipe.parse("mean@-1,-2:concat")
    assert Recipe("mean", layers="last") == Recipe("mean") == Recipe.parse("mean@last")


def test_the_older_bracket_form_of_compare_rows_parses() -> None:
    assert Recipe.parse("mean [last4]") == Recipe("mean", layers="last4")
    assert Recipe.parse("cls+mean [first_last]") == Recipe("cls+mean", layers="first_last")


def test_every_compare_row_name_round_trips() -> None:
    from poolkit.compare.candidates import candidates

    for level in ("sequence", "word", "span"):
        for c in candidates(level, None, [*LAYER_PRESETS, "-1,-2", "3"]):
            name = str(c)
            assert Recipe.parse(name) == c, name
            assert str(Recipe.parse(name)) == name
            assert c.level == level


names = st.sampled_from(SEQUENCE_STRATEGIES)
seq_parts = st.lists(st.tuples(names, st.booleans()), min_size=1, max_size=3, unique=True)
layer_specs = st.one_of(
    st.none(),
    st.sampled_from(sorted(LAYER_PRESETS)),
    st.lists(st.integers(-6, 6), min_size=1, max_size=3).map(tuple),
)


@given(
    parts=seq_parts,
    layers=layer_specs,
    how=st.sampled_from(["mean", "sum", "concat"]),
    normalize=st.sampled_from([None, True, False]),
)
def test_round_trip_of_any_sequence_recipe(parts, layers, how, normalize) -> None:
    strategy = "+".join(n + ("_no_special" if d else "") for n, d in parts)
    r = Recipe(strategy, layers=layers, layer_how=how, normalize=normalize)
    assert Recipe.parse(str(r)) == r
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["version"] == 1
    assert Recipe.from_json(doc) == r
    assert str(Recipe.from_json(doc)) == str(r)


@pytest.mark.parametrize("name", ["word:" + w for w in WORD_STRATEGIES])
def test_word_round_trip(name: str) -> None:
    r = Recipe.parse(name)
    assert r.level == "word" and str(r) == name
    assert Recipe.from_json(r.to_json()) == r


def test_recipe_is_immutable_and_hashable() -> None:
    r = Recipe.parse("cls+mean@last4")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.strategy = "max"  # type: ignore[misc]
    assert len({r, Recipe.parse("cls+mean [last4]")}) == 1


# ---------------------------------------------------------------- output_dim vs real output


def _layer_stack(n_layers: int = 7, b: int = 2, length: int = 5, h: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, length, h)).astype(np.float32) for _ in range(n_layers)]


@given(parts=seq_parts, layers=layer_specs, how=st.sampled_from(["mean", "sum", "concat"]))
def test_output_dim_is_the_width_the_core_functions_return(parts, layers, how) -> None:
    strategy = "+".join(n + ("_no_special" if d else "") for n, d in parts)
    r = Recipe(strategy, layers=layers, layer_how=how)
    states = _layer_stack()
    hidden = states[-1] if r.layers is None else poolkit.layer_mix(states, r.layers, how)
    mask = np.ones(hidden.shape[:2], dtype=bool)
    special = np.zeros_like(mask)
    special[:, 0] = special[:, -1] = True
    width = sum(
        poolkit.sequence_embedding(
            hidden, mask, name, special_tokens_mask=special, exclude_special=drop
        ).shape[-1]
        for name, drop in r.parts
    )
    assert r.output_dim(6) == width


@pytest.mark.parametrize(
    ("name", "dim"),
    [("word:first", 6), ("word:endpoints", 12), ("span:endpoints", 12), ("span:x,y,x*y", 18),
     ("span:mean@last4:concat", 24), ("cls+mean", 12)],
)  # fmt: skip
def test_output_dim_word_and_span(name: str, dim: int) -> None:
    assert Recipe.parse(name).output_dim(6) == dim


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("bad", "closest"),
    [("meen", "mean"), ("mean_no_specal", "mean_no_special"), ("mean@last5", "mean@last4"),
     ("word:firs", "word:first"), ("clss+mean", None), ("mean@", None), ("span:foo", None)],
)  # fmt: skip
def test_bad_names_give_one_line_with_the_forms_and_the_closest(bad: str, closest) -> None:
    with pytest.raises(ValueError) as info:
        Recipe.parse(bad)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("Expected `recipe`")
    assert "but got '" in msg
    assert "Valid forms: [LEVEL:]STRATEGY" in msg
    assert "Closest valid name: " in msg
    if closest:
        assert f"Closest valid name: {closest}." in msg
    assert isinstance(info.value, poolkit.RecipeError)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [({"strategy": ""}, "strategy"), ({"strategy": "mean", "level": "token"}, "level"),
     ({"strategy": "mean", "layer_how": "avg"}, "layer_how"),
     ({"strategy": "mean", "normalize": "yes"}, "normalize"),
     ({"strategy": "first", "level": "word", "exclude_special": True}, "exclude_special"),
     ({"strategy": "mean", "layers": [1.5]}, "layers"), ({"strategy": "mean", "layers": []}, "layers"),
     ({"strategy": "avg"}, "strategy"), ({"strategy": "firs", "level": "word"}, "strategy")],
)  # fmt: skip
def test_bad_fields_are_refused_when_built(kwargs, arg) -> None:
    # The message names the argument that was wrong, as the functions always did.
    with pytest.raises(ValueError, match=f"^Expected `{arg}` to be"):
        Recipe(**kwargs)


def test_from_json_refuses_unknown_versions_and_keys() -> None:
    doc = Recipe.parse("mean").to_json()
    with pytest.raises(ValueError, match="version"):
        Recipe.from_json({**doc, "version": 99})
    with pytest.raises(ValueError, match="keys"):
        Recipe.from_json({**doc, "extra": 1})


@pytest.mark.parametrize(
    "name, closest",
    [("meen/256/int8", "mean/256/int8"), ("cls+meen@last4/binary", "cls+mean@last4/binary"),
     ("maxx/l2", "max/l2"), ("meen", "mean")],
)  # fmt: skip
def test_the_closest_name_is_found_per_segment(name, closest):
    """The strategy part is matched alone and the valid segments kept: ``meen/256/int8``
    is one letter from ``mean/256/int8`` (the whole string's closest was ``min``)."""
    with pytest.raises(RecipeError, match=f"Closest valid name: {re.escape(closest)}\\.$"):
        Recipe.parse(name)
