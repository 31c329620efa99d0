"""One message template: ``src/poolkit/_errors.py`` builds every "Expected ..." message.

A source scan finds any string in the package, outside ``_errors.py``, that starts a
message by hand ("Expected ...", f"Expected ..."), so a drifting copy cannot come back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from poolkit._errors import arg_names, expected, render, unmet, value_error
from poolkit.recipe import RecipeError

SRC = Path(__file__).resolve().parents[1] / "src" / "poolkit"


_OPENING = re.compile(r"\bExpected\b")  # the template's opening word, wherever it stands


def _hand_written(source: str) -> list[int]:
    """Line numbers of string literals (plain, or any piece of an f-string) that hold the
    template's opening "Expected": at the start, after a prefix (f"{path}: Expected ..."),
    or in a piece built up with + or a format string. Docstrings are not messages."""
    tree = ast.parse(source)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
    }  # fmt: skip
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if _OPENING.search(node.value):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_the_scan_finds_hand_written_messages():
    # The scan can fail: each way of writing the message by hand is found.
    assert _hand_written('raise ValueError(f"Expected `x` to be 1, but got {y}.")') == [1]
    assert _hand_written('raise TypeError(\n    "Expected a str, "\n    "but got int.")') == [2]
    assert _hand_written('m = f"""\n  Expected {a}"""') == [1]
    assert _hand_written('expected("x", "1", y)  # "Expected" only in a comment') == []
    # Not only at the start of a literal: after a prefix, in a later piece, in a template.
    assert _hand_written('raise ValueError(f"{path}: Expected a file, but got {x}.")') == [1]
    assert _hand_written('m = "line 3: " + "Expected `x` to be 1."') == [1]
    assert _hand_written('m = "{}: Expected {}".format(a, b)') == [1]
    assert _hand_written('def f():\n    """Expected to be called once."""') == []


def test_no_message_is_written_by_hand_outside_errors_module():
    found = [
        f"{path.relative_to(SRC.parent)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "_errors.py"
        for line in _hand_written(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "build these messages with poolkit._errors (expected, unmet, ...)"


def test_expected_names_the_argument_the_expectation_the_input_and_the_fix():
    assert expected("max_length", "a positive integer", 0, "Pass 128.") == (
        "Expected `max_length` to be a positive integer, but got 0. Pass 128."
    )
    assert expected("texts", "a list of strings", "str") == (
        "Expected `texts` to be a list of strings, but got str."
    )
    with pytest.raises(ValueError, match=r"^Expected `x` to be 1, but got 2\.$"):
        value_error("x", "1", 2)


def test_command_line_names_are_written_as_typed():
    # Flags and metavars read as on the command line, the way the command line's table writes flags.
    assert expected("--workers", "a positive integer", 0) == (
        "Expected --workers to be a positive integer, but got 0."
    )
    assert expected("INPUT", "a file", "neither") == "Expected INPUT to be a file, but got neither."
    error = RecipeError(arg="overwrite", expected="True or False", got="'yes'")
    flags = {"overwrite": "--overwrite"}.get
    assert render(error, flags) == "Expected --overwrite to be True or False, but got 'yes'."


def test_unmet_states_a_check_on_a_state():
    assert unmet("an open writer", "it was already closed") == (
        "Expected an open writer, but it was already closed."
    )
    assert unmet("the job to write 3 rows", "it wrote 2", "The output was not published.") == (
        "Expected the job to write 3 rows, but it wrote 2. The output was not published."
    )


def test_a_recipe_part_is_refused_as_the_whole_recipe():
    from poolkit import Recipe

    with pytest.raises(RecipeError) as e:
        Recipe.parse("avg")
    assert e.value.arg == "recipe"
    assert str(e.value).startswith("Expected `recipe` to be ")
    assert "Valid forms: " in str(e.value)


def test_arg_names():
    assert arg_names(["strategy"]) == "`strategy`"
    assert arg_names(["strategy", "layers"]) == "`strategy` and `layers`"
    assert arg_names(["a", "b", "c"]) == "`a`, `b` and `c`"


def test_library_checks_word_for_word():
    from types import SimpleNamespace

    from poolkit.compare.bootstrap import resampled_scores
    from poolkit.errors import InputError
    from poolkit.io.readers import input_format

    with pytest.raises(InputError) as e:
        input_format("a.txt", "docx")
    assert str(e.value) == (
        "Expected `fmt` to be one of txt, jsonl, csv, tsv, parquet, but got 'docx'."
    )
    two = {"a": SimpleNamespace(units=3), "b": SimpleNamespace(units=5)}
    with pytest.raises(ValueError) as e:
        resampled_scores(two, 10)  # type: ignore[arg-type]
    assert str(e.value) == "Expected `evaluations` to be over the same units, but got sizes [3, 5]."
