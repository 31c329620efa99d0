"""Every example in the README and the docs runs as shown.

Which blocks run (README.md and every ``docs/**/*.md``):

- ``python`` blocks run (pytest-examples), each in a scratch folder that holds the
  repository's ``tests/`` (so ``tests/data/...`` paths work as in a clone), and every
  ``print`` shows its output on the ``#>`` lines under it.
- ``console`` blocks: each ``$ command`` runs in a scratch folder that holds the README's
  ``texts.txt`` and the repository's ``tests/`` (so ``tests/data/...`` paths work as in a
  clone); its standard output must be the lines shown under it (``...`` matches anything, as
  in doctest). A plain ``poolkit ...`` runs in the test process (``clitools.run_cli``); a
  shell line (a pipe, a redirection) runs in a shell with the console script on ``PATH``.
- Any other block, and a ``python`` or ``console`` block that must not run, carries the
  reason on the line right above its opening fence, as an HTML comment (invisible on the
  site)::

      <!-- not run: it downloads Qwen3-Embedding-0.6B (1.2 GB) -->
      ```python

  ``test_every_code_block_runs_or_says_why_not`` fails on a block with neither.
- Both example tests are ``slow`` (they load the real model, or start ``poolkit``): they run
  with ``python -m pytest --slow``. The checks of the docs' structure are fast.
- ``python -m pytest tests/test_docs.py --slow --update-examples`` (pytest-examples' option)
  rewrites the shown output of both kinds from a real run instead of comparing.
- The README starts with the install-and-run command and the test command, and CI runs the
  latter.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import clitools
import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TEXTS = "John works at Google.\nA man is playing a guitar.\n"  # the README's texts.txt


def _id(example: CodeExample) -> str:
    return f"{example.path.name}:{example.start_line}"


NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    not_run: str | None  # the reason, when the line above says the block is not run


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` (fences at the start of a line), with its marker."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    inside = False
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if not fence:
            continue
        if inside:
            inside = False
            continue
        inside = True
        marker = NOT_RUN.match(lines[number - 2].strip()) if number > 1 else None
        blocks.append(Block(path, number, fence["lang"], marker and marker["reason"]))
    return blocks


BLOCKS = [b for path in DOCS for b in code_blocks(path)]
SKIPPED = {(b.path, b.line) for b in BLOCKS if b.not_run}
PYTHON = [
    e
    for e in find_examples(*DOCS)
    if e.prefix in ("python", "py") and (e.path, e.start_line) not in SKIPPED
]


@pytest.mark.slow
@pytest.mark.parametrize("example", PYTHON, ids=_id)
def test_python_examples_print_what_they_show(example, eval_example: EvalExample, tmp_path):
    if "import ray" in example.source:
        return _run_in_a_fresh_interpreter(example, tmp_path)
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # tests/data/... as in a clone
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        if eval_example.update_examples:
            eval_example.run_print_update(example)
        else:
            eval_example.run_print_check(example)
    finally:
        os.chdir(cwd)


def _run_in_a_fresh_interpreter(example: CodeExample, tmp_path: Path) -> None:
    """Run a Ray example as a script: it starts its own cluster and worker processes, which
    must not meet the test process's state; a deadlock fails at the timeout, never hangs.
    What it prints must be its ``#>`` lines, in order."""
    script = tmp_path / "example.py"
    script.write_text(example.source, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, timeout=300
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    shown = [
        line.strip()[3:] for line in example.source.splitlines() if line.strip().startswith("#> ")
    ]
    assert result.stdout.decode().splitlines() == shown


# --- console blocks ---------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    path: Path
    line: int  # 1-based line of the `$ ` in the file
    command: str
    shown: str  # the output lines under it, joined with newlines

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}"


def console_commands(path: Path) -> list[Command]:
    """Every ``$ command`` of the ``console`` blocks in ``path``, with the output shown."""
    out = []
    lines = path.read_text(encoding="utf-8").splitlines()
    inside = False
    current: list = []
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            inside = line.strip() == "```console" and (path, number) not in SKIPPED
            if current:
                out.append(Command(path, current[0], current[1], "\n".join(current[2])))
                current = []
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            if current:
                out.append(Command(path, current[0], current[1], "\n".join(current[2])))
            current = [number, line[2:], []]
        elif current and current[1].endswith("\\") and not current[2]:
            current[1] = current[1][:-1] + line.strip()
        elif current:
            current[2].append(line)
    return out


CONSOLE = [c for path in DOCS for c in console_commands(path)]


def _rewrite(command: Command, output: str) -> None:
    """Replace the lines shown under ``command`` with ``output`` (``--update-examples``)."""
    # Earlier rewrites may have moved the command: find it again by its text.
    line = {c.command: c.line for c in console_commands(command.path)}[command.command]
    lines = command.path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = line  # index of the line after the `$ ` line (0-based)
    while lines[start - 1].rstrip().endswith("\\"):
        start += 1
    end = start
    while not lines[end].startswith(("$ ", "```")):
        end += 1
    new = [line + "\n" for line in output.splitlines()]
    command.path.write_text("".join(lines[:start] + new + lines[end:]), encoding="utf-8")


# A decimal figure printed with d decimals, signed with '-', '+' or the typographic minus.
_DECIMAL = re.compile(r"[-+\u2212]?\d+\.\d+")
# How far a shown decimal may be from the printed one, in units of its last digit. The same
# model on another CPU (AVX2 vs AVX-512 sums) moves a float in its 7th digit; a figure near a
# rounding edge (an int8 code, a bootstrap percentile) then moves by 1-2 in the 4th decimal.
# The figures themselves are checked against independent references by the other tests.
_NOISE_UNITS = 3


# `...` between two spaces in shown output: the run's measured times (compare's query and
# search milliseconds), any text within one line.
_ELIDED = " ... "


def _same_but_float_noise(shown: str, printed: str) -> bool:
    """The same text, every decimal within ``_NOISE_UNITS`` of its last digit, printed with
    as many decimals; integers and words exactly; `` ... `` (a measured time) stands for
    any text within its line (any other ``...`` that elides text: no match)."""
    if _ELIDED in shown:  # the printed text less what each `` ... `` stands for
        parts = [
            "(" + _DECIMAL.pattern.join(re.escape(x) for x in _DECIMAL.split(part)) + ")"
            for part in shown.split(_ELIDED)
        ]
        match = re.fullmatch(r" [^\n]*? ".join(parts), printed)
        if match is None:
            return False
        printed = _ELIDED.join(match.groups())
    if _DECIMAL.split(shown) != _DECIMAL.split(printed):
        return False
    pairs = zip(_DECIMAL.findall(shown), _DECIMAL.findall(printed), strict=True)

    def value(figure: str) -> float:
        return float(figure.replace("\u2212", "-"))

    return all(
        len(a.split(".")[1]) == len(b.split(".")[1])
        and abs(value(a) - value(b)) <= _NOISE_UNITS * 10 ** -len(a.split(".")[1]) + 1e-12
        for a, b in pairs
    )


def test_float_noise_is_the_only_slack():
    shown = " 9  mean/64/int8  64  0.8672 [0.8215, 0.9030]  \u22120.0285 [\u22120.0514, \u22120.0090]  yes"
    assert _same_but_float_noise(shown, shown.replace("0.8672", "0.8671").replace("0514", "0516"))
    for changed in (
        shown.replace("0.8672", "0.8676"),  # 4 units: more than noise
        shown.replace(" 64 ", " 65 "),  # integers exactly
        shown.replace("yes", "no"),  # words exactly
        shown.replace("0.8672", "0.867"),  # as many decimals
        shown.replace("\u22120.0285", "+0.0285"),  # the sign is part of the figure
    ):
        assert not _same_but_float_noise(shown, changed), changed
    assert not _same_but_float_noise("mean...0.8672", "mean x 0.8671")  # `...`: doctest's
    # ` ... `: a measured time, any text within its line; the figures around it as above.
    assert _same_but_float_noise("mean ... 0.8672", "mean 13.41  0.664 0.8671")
    assert not _same_but_float_noise("mean ... 0.8672", "mean 13.41  0.664 0.8676")
    assert not _same_but_float_noise("mean ... 0.8672", "mean 13.41\n 0.8672")
    assert not _same_but_float_noise("mean ... 0.8672", "cls 13.41 0.8672")
    assert _same_but_float_noise("(= ...) 0.8672", "(= ...) 0.8671")  # a literal `...`


@pytest.mark.slow
@pytest.mark.parametrize("command", CONSOLE, ids=str)
def test_console_examples_print_what_they_show(command: Command, tmp_path, request):
    (tmp_path / "texts.txt").write_text(TEXTS, encoding="utf-8")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    argv = shlex.split(command.command)
    if argv[0] == "poolkit" and not set("|<>;&$`") & set(command.command):
        result = clitools.run_cli(argv[1:], cwd=tmp_path)  # a plain command: in this process
    else:  # a shell line: this environment's `python`, and the `poolkit` console script
        bin_dir = Path(sys.executable).parent
        env = clitools.with_poolkit_on_path(
            {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        )
        result = subprocess.run(
            command.command, shell=True, cwd=tmp_path, env=env, capture_output=True, timeout=600
        )
    assert result.returncode == 0, result.stderr.decode()
    output = result.stdout.decode().rstrip("\n")
    checker = doctest.OutputChecker()
    matches = checker.check_output(
        command.shown + "\n", output + "\n", doctest.ELLIPSIS
    ) or _same_but_float_noise(command.shown, output)
    # Shown output may elide machine-specific parts (paths) with `...`: keep it when it matches.
    if request.config.getoption("--update-examples") and not matches:
        _rewrite(command, output)
        return
    assert matches, (
        f"{command}: `{command.command}` printed\n{output}\n\nbut the docs show\n{command.shown}"
    )


# --- the first two commands ---------------------------------------------------------------


def test_readme_starts_with_install_and_test_commands():
    first = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    run_line, test_line = first.group(1).splitlines()[:2]
    assert "pip install" in run_line and "poolkit embed" in run_line
    test_command = test_line.split("&&")[-1].strip()
    assert test_command == "python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    # CI runs the README's two lines, as they stand, in a fresh clone.
    assert """sed -n '/^```bash$/,/^```$/p' README.md""" in ci
    assert '-c "${readme[0]}"' in ci and '-c "${readme[1]}"' in ci


def test_the_readme_says_which_test_command_runs_which():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ("python -m pytest -q", "python -m pytest -q --slow"):
        assert f"`{command}`" in readme, command
    # The slow set and the fast tests that read the data sets; the fast set in the clone.
    assert 'python -m pytest -q -m "slow or data"' in ci
    assert "mkdocs build --strict" in ci and "mkdocs build --strict" in readme


def test_the_readme_outputs_are_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/texts.txt" in ignored and "/vectors.npy" in ignored


# --- the docs' structure (fast) ---------------------------------------------------------


def test_every_code_block_runs_or_says_why_not():
    """A block runs (``python``, ``console``) or says why not on the line above it."""
    unmarked = [
        f"{b.path.relative_to(ROOT)}:{b.line} ```{b.lang}"
        for b in BLOCKS
        if b.lang not in ("python", "py", "console") and not b.not_run
    ]
    assert not unmarked, (
        "each of these blocks is neither run by the tests nor marked "
        f"`<!-- not run: REASON -->` on the line above it: {unmarked}"
    )
    assert PYTHON and CONSOLE


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to a missing file: {target}"


def _api_directives() -> set[str]:
    return {
        m
        for page in (ROOT / "docs" / "api").glob("*.md")
        for m in re.findall(r"^::: (\S+)$", page.read_text(encoding="utf-8"), flags=re.M)
    }


def test_the_api_reference_documents_every_public_name():
    import inspect

    import poolkit
    import poolkit.errors
    import poolkit.nn

    directives = _api_directives()

    def documented(module: str, name: str) -> bool:
        # named itself, or its module is (`::: poolkit.errors` documents its members)
        return f"{module}.{name}" in directives or module in directives

    def home(name: str) -> str:
        obj = getattr(poolkit, name)
        return obj.__module__ if inspect.isclass(obj) else "poolkit"

    missing = [
        f"poolkit.{n}"
        for n in poolkit.__all__
        if not documented("poolkit", n) and not documented(home(n), n)
    ]
    for module in (poolkit.nn, poolkit.errors):
        names = getattr(module, "__all__", None) or [
            n
            for n, obj in vars(module).items()
            if not n.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj))
            and obj.__module__ == module.__name__
        ]
        assert names, module
        missing += [f"{module.__name__}.{n}" for n in names if not documented(module.__name__, n)]
    assert not missing, f"not in docs/api/*.md as a `::: name` line: {missing}"


def test_every_docs_page_is_in_the_nav():
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r"^\s+- .*?([\w/.-]+\.md)$", mkdocs, flags=re.M))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == nav, (pages - nav, nav - pages)
