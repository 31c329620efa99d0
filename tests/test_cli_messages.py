"""Messages that send users the right way (issue 16, item 4), checked word for word.

Library calls name arguments, the command line names flags; a folder without
``--engine ray``; one line when a model's pooling is a guess; one form and one exit status
for a missing optional extra; singular and plural. CLI checks run ``poolkit`` in this
process, except a missing extra: a ``sitecustomize`` makes the import fail in a fresh
interpreter only, so those run as their own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import clitools
import pytest

from poolkit.io.readers import InputError, read_all

REPO = Path(__file__).resolve().parents[1]


def poolkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``poolkit ARGS`` (in this process), its output as text."""
    result = clitools.run_cli(args, cwd=cwd)
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


def poolkit_process(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``poolkit ARGS`` as its own process: ``env`` blocks imports as the interpreter starts."""
    return subprocess.run(clitools.command(*args), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def blocking(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment whose interpreters cannot import ``modules`` (nor their submodules)."""
    folder = tmp_path / ("no-" + "-".join(modules))
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCKED = {modules!r}\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Block())\n",
        encoding="utf-8",
    )
    paths = [str(folder), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


# --- library messages name arguments; the CLI names flags ---------------------------


def test_library_reader_names_the_argument_not_the_flag(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_all(tmp_path / "a.txt", text_column="text")
    assert str(e.value) == (
        f"{tmp_path / 'a.txt'}: Expected `text_column` to be unset for a .txt input (it has no columns), but got 'text'. Leave it unset."
    )
    with pytest.raises(InputError) as e:
        read_all(tmp_path / "a.docx")
    assert (
        str(e.value) == f"{tmp_path / 'a.docx'}: Expected an input file, but there is no such file."
    )


@pytest.mark.slow
def test_read_corpus_names_the_argument_not_the_flag(tmp_path):
    ray = pytest.importorskip("ray")
    from poolkit.ray import read_corpus

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    (corpus / "b.txt").write_text("three\n", encoding="utf-8")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        with pytest.raises(InputError) as e:
            read_corpus(corpus, text_column="text")
    finally:
        if started:
            ray.shutdown()
    # The files are scanned in parallel: either one may be the first to answer.
    assert str(e.value) in {
        f"{corpus / name}: Expected `text_column` to be unset for a .txt input (it has no columns), but got 'text'. Leave it unset."
        for name in ("a.txt", "b.txt")
    }
    assert "--" not in str(e.value)


def test_cli_names_the_flag(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n", encoding="utf-8")
    result = poolkit("embed", "a.txt", "-o", "o.npy", "--text-column", "text", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, "poolkit: error: a.txt: Expected --text-column to be unset for a .txt input (it has no "
        "columns), but got 'text'. Leave it unset.\n"
    )  # fmt: skip
    (tmp_path / "a.jsonl").write_text('{"body": "hello"}\n', encoding="utf-8")
    result = poolkit("embed", "a.jsonl", "-o", "o.npy", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, 'poolkit: error: a.jsonl: line 1: Expected a "text" field, but its fields are: body. '
        "Choose one with --text-column.\n",
    )  # fmt: skip


def test_a_folder_without_engine_ray(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("hello\n", encoding="utf-8")
    result = poolkit("embed", "corpus", "-o", "o.npy", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, "poolkit: error: corpus: Expected one file (or - for stdin), but got a folder. "
        "Add --engine ray to embed every file of a folder (see docs/scaling.md).\n",
    )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


# --- a guessed pooling is said once ---------------------------------------------------

GUESS = "poolkit: note: no file states this model's pooling; using mean — pass --recipe to choose"


@pytest.mark.slow
def test_embed_says_when_the_pooling_is_a_guess(tmp_path, tiny_dirs):
    (tmp_path / "in.txt").write_text("one text\nanother text\n", encoding="utf-8")
    plain = str(tiny_dirs["bert_plain"])
    result = poolkit("embed", "in.txt", "-o", "o.npy", "--model", plain, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == GUESS and len(lines) == 2 and lines[1].startswith("poolkit: 2 texts -> ")
    chosen = poolkit("embed", "in.txt", "-o", "m.npy", "--model", plain, "-s", "mean",
                     cwd=tmp_path)  # fmt: skip
    assert chosen.returncode == 0 and "note" not in chosen.stderr
    stated = poolkit("embed", "in.txt", "-o", "c.npy", "--model", str(tiny_dirs["bert_cls"]),
                     cwd=tmp_path)  # fmt: skip
    assert stated.returncode == 0 and "note" not in stated.stderr


@pytest.mark.slow
def test_compare_says_when_the_pooling_is_a_guess(tmp_path, tiny_dirs):
    rows = ["sentence1,sentence2,score"]
    words = ["cat", "dog", "tree", "car", "house", "river", "bird", "train"]
    rows += [f"a {a} sleeps,the {b} sleeps,{(i * 7) % 5}" for i, (a, b) in
             enumerate(zip(words, words[1:] + words[:1], strict=True))]  # fmt: skip
    (tmp_path / "pairs.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    result = poolkit("compare", "pairs.csv", "--task", "sts", "--model",
                     str(tiny_dirs["bert_plain"]), "--strategies", "mean", "cls", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "pooling" in line]
    assert notes == [
        "poolkit: note: no file states this model's pooling; marking mean as intended — "
        "check the model card"
    ]


# --- a missing optional extra: one form, exit status 2, nothing written ---------------


@pytest.mark.parametrize(
    ("module", "argv", "line"),
    [
        ("onnxruntime", ["embed", "in.txt", "-o", "o.npy", "--backend", "onnx"],
         "--backend onnx needs onnxruntime, which is not installed: pip install 'poolkit[onnx]'"),
        ("ray", ["embed", "in.txt", "-o", "out", "--engine", "ray"],
         "--engine ray needs Ray Data, which is not installed: pip install 'poolkit[ray]'"),
        ("matplotlib", ["compare", "in.csv", "--task", "sts", "--plot", "p.png"],
         "--plot needs matplotlib, which is not installed: pip install 'poolkit[compare]'"),
    ],
)  # fmt: skip
def test_missing_extra_one_form_exit_2(tmp_path, module, argv, line):
    (tmp_path / "in.txt").write_text("hello\n", encoding="utf-8")
    (tmp_path / "in.csv").write_text("sentence1,sentence2,score\na,b,1\n", encoding="utf-8")
    env = blocking(tmp_path, module)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = poolkit_process(*argv, cwd=tmp_path, env=env)
    assert (result.returncode, result.stderr) == (2, f"poolkit: error: {line}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [*before]


def test_missing_extra_in_the_library(tmp_path):
    code = (
        "import poolkit.ray, poolkit.backends.onnx as onnx\n"
        "for call in (poolkit.ray.require_ray, onnx._import_ort):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    env = blocking(tmp_path, "ray", "onnxruntime")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "RayNotInstalledError poolkit.ray needs Ray Data, which is not installed: "
        "pip install 'poolkit[ray]'",
        "MissingDependencyError The ONNX backend needs onnxruntime, which is not installed: "
        "pip install 'poolkit[onnx]'",
    ]


# --- singular and plural ---------------------------------------------------------------


def test_count():
    from poolkit._errors import count

    assert [count(1, "CPU"), count(2, "CPU"), count(0, "text"), count(1, "blank text")] == [
        "1 CPU", "2 CPUs", "0 texts", "1 blank text"
    ]  # fmt: skip


@pytest.mark.slow
def test_one_blank_text_and_one_text(tmp_path):
    (tmp_path / "in.txt").write_text("one\n\ntwo\n", encoding="utf-8")
    result = poolkit("embed", "in.txt", "-o", "o.npy", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == (
        "poolkit: warning: 1 blank text (empty or whitespace only) was kept as an empty text, id 1."
    )
    assert lines[1].startswith("poolkit: 3 texts -> o.npy")
    (tmp_path / "one.txt").write_text("one\n", encoding="utf-8")
    single = poolkit("embed", "one.txt", "-o", "one.npy", cwd=tmp_path)
    assert single.returncode == 0 and single.stderr.startswith("poolkit: 1 text -> one.npy ")


# --- the command line's own checks name its flags and metavars, through _errors ----------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["spans", "--text", "x"],
         "Expected --span to be given at least once (START:END) with --text, but got none."),
        (["spans", "--text", "x", "--span", "a-b"],
         "Expected --span to be START:END (character offsets, e.g. 11:20), but got 'a-b'."),
        (["spans"], "Expected INPUT to be a file, or --text given with --span, but got neither."),
        (["tokens"],
         "Expected INPUT to be a file (or '-' for stdin), or --text given, but got neither."),
    ],
)  # fmt: skip
def test_cli_checks_word_for_word(tmp_path, argv, line):
    result = poolkit(*argv, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"poolkit: error: {line}\n")
    assert list(tmp_path.iterdir()) == []
