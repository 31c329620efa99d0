"""The 'Closest valid name' hint of a refused recipe: always a valid name, never the name
refused (``splade/top0`` once suggested ``splade/top0``), the bad segment left out."""

from __future__ import annotations

import re

import pytest
from clitools import one_error_line, run_cli

from poolkit import Recipe, RecipeError

BAD = [
    "splade/top0", "splade/top0/int8", "mean/0", "mean/float16/float16",
    "multivector:tokens/pool0", "multivector:tokens/pool0.5", "meen/top0", "meen/256/int8",
    "mean@last4:cat", "word:frist", "splade/top-1", "multivector:tokens/8/muvera:k_sim=99",
]  # fmt: skip


def _hint(name: str) -> str | None:
    with pytest.raises(RecipeError) as e:
        Recipe.parse(name)
    found = re.search(r"Closest valid name: (.+)\.$", str(e.value))
    return found.group(1) if found else None


@pytest.mark.parametrize("name", BAD)
def test_hint_is_valid_and_never_the_refused_name(name):
    hint = _hint(name)
    if hint is not None:
        assert hint.lower() != name.lower()
        Recipe.parse(hint)  # the suggestion itself is accepted


@pytest.mark.parametrize(("name", "want"), [
    ("splade/top0", "splade"), ("mean/0", "mean"), ("meen/256/int8", "mean/256/int8"),
    ("multivector:tokens/pool0", "multivector:tokens"), ("mean/float16/float16", "mean/float16"),
])  # fmt: skip
def test_bad_segment_is_left_out(name, want):
    assert _hint(name) == want


def test_cli_line_does_not_repeat_the_refused_name(tmp_path):
    (tmp_path / "in.txt").write_text("a text\n", encoding="utf-8")
    r = run_cli(["embed", "in.txt", "-o", "x.npz", "--recipe", "splade/top0"], cwd=tmp_path)
    one_error_line(r, 2, "--recipe", "positive number", "Closest valid name: splade.")
    assert "Closest valid name: splade/top0" not in r.stderr.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
