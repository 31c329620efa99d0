"""One reader of a layer spec (``poolkit.layers.layer_spec``) behind every way to name layers:
``layer_mix``, ``Recipe``, recipe names, ``compare`` candidates, and ``--layers`` of every
command; a mistyped spec gets one line about layers only."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

import poolkit as pk
from poolkit import Recipe
from poolkit.cli import build_parser, main
from poolkit.compare.candidates import candidates
from poolkit.layers import layer_indices, layer_mix, layer_name, layer_spec

# Spelling -> the hidden states (by index, negative from the end) it averages, written out.
SPELLINGS = [
    (None, [-1]), ("last", [-1]), (" LAST ", [-1]), (-1, [-1]), ([-1], [-1]), ("-1", [-1]),
    ("-1,", [-1]), ("last4", [-4, -3, -2, -1]), ("Last4", [-4, -3, -2, -1]),
    ("first_last", [1, -1]), ("second_last", [-2]), ("-1,-2", [-1, -2]), (" -1, -2 ", [-1, -2]),
    ("2", [2]), (2, [2]), ((0, -1), [0, -1]), ([1, 2, 3], [1, 2, 3]),
]  # fmt: skip

MESSAGE = (
    "to be one of last, last4, first_last, second_last or indices like -1,-2, "
    "but got 'lastt'. Closest: last."
)


@pytest.mark.parametrize(("spec", "indices"), SPELLINGS)
def test_every_reader_takes_a_spelling_the_same_way(spec, indices) -> None:
    states = np.random.default_rng(0).standard_normal((7, 2, 3, 4)).astype(np.float32)
    want = sum(states[i] for i in indices[1:]) if len(indices) > 1 else None
    want = states[indices[0]] if want is None else (states[indices[0]] + want) / len(indices)
    np.testing.assert_allclose(layer_mix(list(states), spec), want, rtol=1e-6, atol=1e-7)
    assert layer_indices(spec) == tuple(indices)
    canonical = layer_spec(spec)
    assert Recipe("mean", layers=spec).layers == canonical
    assert (canonical is None) == (indices == [-1])  # the last layer has one spelling: None
    assert layer_spec(layer_name(spec)) == canonical  # the text a row shows reads back
    if isinstance(spec, str):
        assert Recipe.parse(f"mean@{spec}").layers == canonical
        (row,) = candidates("sequence", ["mean"], [spec])
        assert row == Recipe("mean", layers=spec)


def test_one_table_of_presets() -> None:
    assert pk.LAYER_PRESETS == {"last": (-1,), "last4": (-4, -3, -2, -1), "first_last": (1, -1),
                                "second_last": (-2,)}  # fmt: skip
    # compare's layer variants are any spec, in the canonical form of the recipe rows.
    rows = candidates("sequence", ["mean"], ["last", "second_last", "-1,-2", "last4", "-1"])
    assert [str(r) for r in rows] == ["mean", "mean@second_last", "mean@-1,-2", "mean@last4"]


@pytest.mark.parametrize(
    "call",
    [
        lambda: layer_spec("lastt"),
        lambda: layer_mix([np.ones((1, 2, 3), np.float32)] * 3, "lastt"),
        lambda: Recipe("mean", layers="lastt"),
        lambda: candidates("sequence", ["mean"], ["lastt"]),
        lambda: pk.embed(["a"], layers="lastt"),
        lambda: pk.embed(["a"], strategy="cls", layers="lastt"),
        lambda: pk.embed_tokens(["a"], layers="lastt"),
        lambda: pk.embed_words([["a"]], layers="lastt"),
        lambda: pk.embed_spans(["ab"], [[(0, 1)]], layers="lastt"),
    ],
)
def test_a_mistyped_spec_is_one_line_about_layers(call) -> None:
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == f"Expected `layers` {MESSAGE}"
    assert isinstance(info.value, pk.PoolkitError)


def test_a_recipe_name_with_a_mistyped_spec_still_shows_the_name_forms() -> None:
    with pytest.raises(pk.RecipeError) as info:
        Recipe.parse("mean@lastt")
    msg = str(info.value)
    assert msg.startswith("Expected `recipe` to be one of last, last4, first_last, second_last")
    assert "Valid forms: [LEVEL:]STRATEGY" in msg and msg.endswith(
        "Closest valid name: mean@last4."
    )


@pytest.mark.parametrize("bad", [1.5, [], [True], True, "", ",", "top"])
def test_other_bad_specs_are_refused_in_the_family(bad) -> None:
    with pytest.raises((TypeError, ValueError), match=r"^Expected `layers` to be ") as info:
        layer_spec(bad)
    assert isinstance(info.value, pk.PoolkitError)
    assert "Valid forms" not in str(info.value)
    with pytest.raises(pk.RecipeError, match=r"^Expected `layers` to be "):
        Recipe("mean", layers=bad)  # a ValueError, as a Recipe always refused


def _commands_with_layers() -> set[str]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        name
        for name, parser in sub.choices.items()
        if any("--layers" in a.option_strings for a in parser._actions)
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["embed", "in.txt", "-o", "out.npy", "--layers", "lastt"],
        ["embed", "in.txt", "-o", "out.npy", "-s", "cls", "--layers", "lastt"],
        ["compare", "in.txt", "--task", "classification", "--layers", "lastt"],
        ["compare", "in.txt", "--task", "classification", "--layers", "last4", "lastt"],
    ],
)
def test_every_layers_flag_answers_in_one_line_about_layers(tmp_path, monkeypatch, capsys, argv):
    # tokens and spans take no --layers: a command that gains one joins this list.
    assert _commands_with_layers() == {"embed", "compare"}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("1 a good film\n0 a bad film\n", encoding="utf-8")
    assert main(argv) == 2
    assert capsys.readouterr() == ("", f"poolkit: error: Expected --layers {MESSAGE}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_layers_flag_gives_the_library_vectors_to_the_bit(tmp_path, tiny_dirs) -> None:
    model = tiny_dirs["bert_cls"]
    texts = ["a good film", "one more text, longer than the first"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    for flag, layers in (("--layers=-1,-2", [-1, -2]), ("--layers= First_Last", "first_last"),
                         ("--layers=2", 2), ("--layers=-1", None)):  # fmt: skip
        argv = ["embed", str(tmp_path / "in.txt"), "-o", str(out), "-s", "mean", flag,
                "--model", str(model), "--quiet", "--overwrite"]  # fmt: skip
        assert main(argv) == 0
        want = pk.embed(texts, model, "mean", layers=layers)
        np.testing.assert_array_equal(np.load(out), want)
