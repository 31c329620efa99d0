"""Structured errors, one renderer (#37).

- A source scan counts the raise sites that still write their message by hand (a string
  literal or f-string as the exception's message) and finds any ``re.sub``/``str.replace``
  applied to an exception's text: messages are rendered once, never rewritten.
- :func:`poolkit._errors.render` writes an error's fields as Python names them, or as the
  command line does through its one table (``poolkit.cli._flags``).
- The command line picks the exit status by the error's class.
"""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from poolkit._errors import recast, render
from poolkit.cli._common import exit_status, report_error
from poolkit.cli._flags import flag_for, flagged, namer
from poolkit.errors import (
    ExportError,
    InputError,
    InputTypeError,
    MissingDependencyError,
    ModelNotFoundError,
    OutputExistsError,
    PipelineError,
    RunError,
)
from poolkit.io.diskfull import DiskFullError
from poolkit.recipe import RecipeError

SRC = Path(__file__).resolve().parents[1] / "src" / "poolkit"
MAX_HAND_WRITTEN = 40  # raise sites whose message is a literal; the rest are fields


# --------------------------------------------------------------------------- the scans


def _is_text(node: ast.AST) -> bool:
    """A string literal, an f-string, or a + of pieces one of which is one."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    return False


def hand_written(source: str) -> list[int]:
    """Lines of ``raise Kind(<literal>...)``: a positional or ``message=`` argument that is
    a string literal or f-string (fields such as ``expected="..."`` are not messages)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call = node.exc
            texts = [*call.args, *(k.value for k in call.keywords if k.arg in ("message", "msg"))]
            if any(_is_text(t) for t in texts):
                lines.append(node.lineno)
    return lines


def _rewrites(call: ast.Call) -> bool:
    """``re.sub``/``re.subn``/``<anything>.replace`` (including ``str.replace``)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("sub", "subn") and isinstance(func.value, ast.Name):
        return func.value.id == "re"
    return func.attr == "replace"


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _text_of_error(node: ast.AST, errors: set[str]) -> bool:
    """Whether ``node`` reads the text of an error named in ``errors``: ``str(e)``,
    ``f"{e}"``, ``e.args``, or ``e`` itself."""
    return bool(_names(node) & errors)


# Names that hold an error or its text wherever they appear.
_TEXT_NAMES = ("e", "err", "error", "exc", "message", "msg")


def message_rewrites(source: str) -> list[int]:
    """Lines where an exception's text is rewritten: ``re.sub``/``.replace`` whose receiver
    or arguments read a caught exception (``except ... as name``), a parameter that holds
    one (annotated ``Exception``/``BaseException`` or a family kind), or a name that
    usually holds an error or a message (``e``, ``error``, ``message``, ...)."""
    tree = ast.parse(source)
    found: set[int] = set()

    def scan(body: list[ast.stmt], errors: set[str]) -> None:
        for stmt in body:
            for node in ast.walk(stmt):
                if not (isinstance(node, ast.Call) and _rewrites(node)):
                    continue
                func = node.func
                assert isinstance(func, ast.Attribute)
                parts = [func.value, *node.args, *(k.value for k in node.keywords)]
                if any(_text_of_error(p, errors) for p in parts):
                    found.add(node.lineno)

    scan(tree.body, set(_TEXT_NAMES))  # anywhere: a message or an error by its usual name
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.name:
            scan(node.body, {node.name})
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            held = set()
            for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                note = ast.unparse(a.annotation) if a.annotation is not None else ""
                if "Exception" in note or "Error" in note:
                    held.add(a.arg)
            if held:
                scan(node.body, held)
    return sorted(found)


def test_the_scans_can_fail():
    assert hand_written('raise InputError(f"{path}: no such file.")') == [1]
    assert hand_written('raise ValueError("bad " + x)') == [1]
    assert hand_written('raise InputError(message="plain")') == [1]
    assert hand_written('raise InputError(where=p, expected="a file", got="none")') == []
    assert hand_written("raise InputError(str(e))") == []
    rewrites = [
        "try:\n    f()\nexcept ValueError as e:\n    m = str(e).replace('`a`', '--a')",
        "try:\n    f()\nexcept ValueError as e:\n    m = re.sub(r'x', 'y', str(e))",
        "try:\n    f()\nexcept ValueError as e:\n    m = e.args[0].replace('a', 'b')",
        "def f(error: Exception):\n    return re.sub('a', 'b', f'{error}')",
        "def f(e: BaseException, flags):\n    return str(e).replace('a', 'b')",
        "def f(message):\n    return str(message).replace('a', 'b')",
        "def f(x):\n    msg = str(x)\n    return msg.replace('a', 'b')",
    ]
    for code in rewrites:
        assert message_rewrites(code), code
    assert message_rewrites("def f(path):\n    return path.name.replace('.', '_')") == []
    assert (
        message_rewrites("try:\n    f()\nexcept ValueError as e:\n    x = s.replace('a', 'b')")
        == []
    )


def _sources() -> dict[str, str]:
    return {
        str(p.relative_to(SRC)): p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))
    }


def test_few_raise_sites_write_their_message_by_hand():
    found = {name: hand_written(text) for name, text in _sources().items()}
    total = sum(len(lines) for lines in found.values())
    worst = sorted(((len(v), k) for k, v in found.items() if v), reverse=True)[:5]
    assert total <= MAX_HAND_WRITTEN, f"{total} hand-written messages; most in {worst}"


def test_no_exception_text_is_rewritten():
    found = [
        f"{name}:{line}" for name, text in _sources().items() for line in message_rewrites(text)
    ]
    assert found == [], "raise an error with fields (arg, where, fix) instead of rewriting it"


# --------------------------------------------------------------------------- the renderer


def _flags(table: dict[str, str]):
    return table.get


def test_python_names_the_argument_the_command_line_its_flag():
    error = InputError(arg="text_column", expected="a column of the input", got="'c'",
                       fix="Its columns: a, b.")  # fmt: skip
    assert str(error) == (
        "Expected `text_column` to be a column of the input, but got 'c'. Its columns: a, b."
    )
    assert render(error, namer(error)) == (
        "Expected --text-column to be a column of the input, but got 'c'. Its columns: a, b."
    )
    # The fix names other arguments the same way, through the same table.
    exists = OutputExistsError("out.npy: already exists; pass `overwrite=True` to replace it.")
    assert (
        render(exists, namer(exists)) == "out.npy: already exists; pass --overwrite to replace it."
    )
    assert str(exists) == "out.npy: already exists; pass `overwrite=True` to replace it."


def test_where_is_a_place_and_index_an_element():
    error = InputError(where="a.jsonl: line 3", expected="valid JSON", got="it is not")
    assert str(error) == "a.jsonl: line 3: Expected valid JSON, but it is not."
    element = InputError(arg="chunks", index=(2, 1), expected="a span", got="(3, 3)")
    assert str(element) == "Expected `chunks[2][1]` to be a span, but got (3, 3)."
    assert (
        render(element, namer(element)) == "Expected --chunks[2][1] to be a span, but got (3, 3)."
    )
    # A caller that knows the input row says so with fields, not by editing the text.
    row = element.but(arg="spans", index=1, where="docs.jsonl: line 5 (id 2)")
    assert (
        str(row) == "docs.jsonl: line 5 (id 2): Expected `spans[1]` to be a span, but got (3, 3)."
    )
    assert str(element) == "Expected `chunks[2][1]` to be a span, but got (3, 3)."  # unchanged


def test_a_command_names_the_flags_of_its_own_step():
    error = RecipeError(arg="recipe", expected="one of cls, mean", got="'avg'")
    assert render(error, namer(error)) == "Expected `recipe` to be one of cls, mean, but got 'avg'."
    named = flagged(error, {"recipe": "--recipes"})
    assert isinstance(named, RecipeError)
    assert (
        render(named, namer(named)) == "Expected --recipes to be one of cls, mean, but got 'avg'."
    )
    assert str(named) == str(error)  # Python still names the argument
    # An error from outside the family keeps its text, as an InputError.
    foreign = flagged(ValueError("plain"), {"recipe": "--recipe"})
    assert isinstance(foreign, InputError) and str(foreign) == "plain"


def test_the_flag_table():
    assert flag_for("overwrite=True") == "--overwrite"
    assert flag_for("sentence2_column") == "--sentence2-column"
    assert flag_for("texts") is None
    assert flag_for("recipe", {"recipe": "--recipes"}) == "--recipes"


def test_fields_survive_a_copy_a_pickle_and_a_recast():
    error = InputError(arg="split", expected="a split", got="'dev'", fix="Its splits: test.")
    back = pickle.loads(pickle.dumps(error))
    assert (back.arg, back.got, str(back)) == ("split", "'dev'", str(error))
    assert isinstance(error, ValueError)
    as_recipe = recast(error, RecipeError)
    assert isinstance(as_recipe, RecipeError) and str(as_recipe) == str(error)
    assert str(recast(KeyError("k"), InputError)) == "'k'"


def test_free_text_still_works():
    assert str(RunError("the job came back incomplete")) == "the job came back incomplete"
    assert str(InputError(where="x.txt", expected="texts", got="the input is empty")) == (
        "x.txt: Expected texts, but the input is empty."
    )


# --------------------------------------------------------------------------- exit statuses


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InputError(arg="x", expected="1", got=2), 2),
        (RecipeError(arg="recipe", expected="a name", got="''"), 2),
        (InputTypeError(arg="texts", expected="a list", got="str"), 2),
        (ModelNotFoundError("no such model"), 2),
        (PipelineError("a module poolkit cannot apply"), 2),
        (MissingDependencyError("pip install 'poolkit[ray]'"), 2),
        (RunError(expected="3 rows", got="it wrote 2"), 1),
        (OutputExistsError("out: already exists"), 1),
        (ExportError(expected="agreement", got="it disagrees"), 1),
        (DiskFullError("out.npy: no space left"), 1),
        (FileNotFoundError("missing"), 2),
        (ValueError("from a library"), 2),
        (KeyError("bug"), 1),
    ],
)
def test_the_exit_status_goes_by_the_error_class(error, status, capsys):
    assert exit_status(error) == status
    assert report_error(error) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("poolkit: error: ")
    assert ("--debug" in err) == (status == 1)
