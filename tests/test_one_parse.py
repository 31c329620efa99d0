"""One parse per recipe per call, on every path.

A spy wraps the one reader of a strategy text (``poolkit.recipe._canonical_strategy``, run
by every recipe built from a name) and the core's reader (``parse_sequence_strategy``)
wherever a poolkit module bound them, and counts their calls during one call of each entry
point: the library's ``embed*``, the CLI's ``embed`` and ``compare``, ``export`` and the
``nn`` modules (the Ray actors: ``tests/test_ray.py``). Each recipe a call names, and the
model's intended one where it is used, is read once; a path that turned a recipe back into
text and read it again, or checked a name by building a stand-in recipe, counts more.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import poolkit
import poolkit.recipe
import poolkit.sequence

TEXTS = ["John works at Google.", "A man plays a guitar."]
PARSERS = (
    (poolkit.recipe, "_canonical_strategy"),
    (poolkit.sequence, "parse_sequence_strategy"),
)


@contextlib.contextmanager
def parses() -> Iterator[list[str]]:
    """Every strategy text read inside the block, in order (a list of the texts)."""
    seen: list[str] = []
    patched = []
    for home, name in PARSERS:
        original = getattr(home, name)

        def spy(*args, _original=original, _text=int(name == "_canonical_strategy"), **kwargs):
            seen.append(str(args[_text]))  # (level, text, ...) or (text,)
            return _original(*args, **kwargs)

        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("poolkit") and (
                getattr(module, name, None) is original
            ):
                setattr(module, name, spy)
                patched.append((module, name, original))
    try:
        yield seen
    finally:
        for module, name, original in patched:
            setattr(module, name, original)


def test_the_spy_sees_a_second_parse():
    with parses() as seen:
        poolkit.Recipe.parse("cls+mean")
        poolkit.Recipe.parse(str(poolkit.Recipe.parse("max")))
    assert seen == ["cls+mean", "max", "max"]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda m: poolkit.embed(TEXTS, m, ["cls+mean", "max"]), ["cls+mean", "max"]),
        (lambda m: poolkit.embed(TEXTS, m, "max", layers="last4"), ["max"]),
        (lambda m: poolkit.embed(TEXTS, m, recipe="mean_no_special@last4/128"), ["mean"]),
        (lambda m: poolkit.embed(TEXTS, m), ["mean"]),  # the model's pooling, once
        (lambda m: poolkit.embed(TEXTS, m, layers="last4", exclude_special=True), ["mean"]),
        (lambda m: poolkit.embed_tokens(TEXTS, m, layers="last4"), ["mean"]),
        (lambda m: poolkit.embed_words([t.split() for t in TEXTS], m, "max"), ["max"]),
        (lambda m: poolkit.embed_spans(TEXTS, [[(0, 4)], [(2, 5)]], m, "x,y"), ["x,y"]),
        (lambda m: poolkit.embed_chunks(TEXTS, "tokens:4", m, ["cls", "max"]), ["cls", "max"]),
    ],
    ids=[
        "strategies",
        "layers",
        "recipe",
        "intended",
        "intended-shaped",
        "tokens",
        "words",
        "spans",
        "chunks",
    ],
)
def test_library_reads_each_recipe_once(minilm_dir, call, expected):
    call(str(minilm_dir))  # the model loads outside the count
    with parses() as seen:
        call(str(minilm_dir))
    assert [s.split("_no_special")[0].split("@")[0] for s in seen] == expected


def test_nn_modules_read_a_name_once_and_a_recipe_never():
    import poolkit.nn as pnn

    with parses() as seen:
        pnn.Pooler("cls+mean", exclude_special=True)
        pnn.WordPooler("max")
    assert seen == ["cls+mean", "max"]
    recipe = poolkit.Recipe.parse("mean_no_special@last4")
    with parses() as seen:
        pnn.Pooler(recipe)
    assert seen == []


def test_cli_embed_reads_each_flag_once(minilm_dir, tmp_path):
    from clitools import run_cli

    def main(args: list[str]) -> int:
        return run_cli(args, cwd=tmp_path).returncode

    (tmp_path / "t.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    argv = ["embed", str(tmp_path / "t.txt"), "--model", str(minilm_dir), "--quiet"]
    with parses() as seen:
        assert main([*argv, "-o", str(tmp_path / "a.parquet"), "-s", "cls+mean", "max"]) == 0
    assert seen == ["cls+mean", "max"]
    with parses() as seen:  # the model's pooling, shaped by the shorthand flags
        assert main([*argv, "-o", str(tmp_path / "b.npy"), "--layers", "last4"]) == 0
    assert seen == ["mean"]


@pytest.mark.slow
def test_compare_reads_each_candidate_once(minilm_dir, tmp_path):
    from clitools import run_cli

    from poolkit.compare.candidates import default_strategies

    def main(args: list[str]) -> int:
        return run_cli(args, cwd=tmp_path).returncode

    sample = str(Path(__file__).parent / "data" / "stsb-dev-sample.csv")
    argv = ["compare", sample, "--task", "sts", "--bootstrap", "0", "--model", str(minilm_dir),
            "--quiet"]  # fmt: skip
    with parses() as seen:
        assert main([*argv, "--recipes", "mean", "cls", "--json", str(tmp_path / "a.json")]) == 0
    # The two candidates (read once in the CLI, handed on as values), then the model's own.
    assert seen == ["mean", "cls", "mean"]
    with parses() as seen:
        assert main([*argv, "--layers", "last4", "--json", str(tmp_path / "b.json")]) == 0
    # The model's pooling, then each default name once (its last4 twin is the same name).
    assert seen == ["mean", *default_strategies("sequence")], seen


@pytest.mark.slow
def test_export_reads_the_recipe_once(minilm_dir, tmp_path):
    with parses() as seen:
        poolkit.export(minilm_dir, tmp_path / "a", recipe="cls+mean")
    assert seen == ["cls+mean"]
    with parses() as seen:
        poolkit.export(minilm_dir, tmp_path / "b")
    assert seen == ["mean"]
