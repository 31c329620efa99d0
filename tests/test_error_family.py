"""Everything poolkit raises on purpose is a ``PoolkitError``, and still the built-in kind it
always was (``except ValueError`` code keeps working).

The source is read, not imported: each ``raise`` in ``src/poolkit`` must name a class of the
family (a subclass of ``PoolkitError`` by the class definitions in the source), or call a
helper whose return annotation is one; anything else (re-raising a caught exception, Python
protocol exceptions) is listed in :data:`ALLOWED` with the reason.
"""

from __future__ import annotations

import ast
import errno
import sys
from pathlib import Path

import numpy as np
import pytest

import poolkit

SRC = Path(__file__).resolve().parents[1] / "src" / "poolkit"

# (file under src/poolkit, the raised expression as ast.unparse writes it): why it may raise
# something outside the family. Only re-raises of caught errors and Python protocol kinds.
ALLOWED = {
    ("backends/__init__.py", "AttributeError"): "module __getattr__: Python's protocol",
    ("cli/_stdout.py", "SystemExit"): "the reader closed stdout: end as Unix filters do",
    ("cli/_signals.py", "Terminated"): "SIGTERM as KeyboardInterrupt: control flow, not an error",
    ("cli/_ray_engine.py", "Terminated"): "SIGTERM while Ray starts: as cli/_signals.py",
    ("compare/logistic.py", "StopIteration"): "stops scipy's optimiser from its callback",
    ("spans.py", "_NotFinite"): "private control flow, caught in the same function",
    ("head.py", "AssertionError"): "unreachable: read_head only builds the kinds handled",
    ("io/diskfull.py", "AssertionError"): "unreachable: the loop returns at the last unit",
    ("diagnosis/search.py", "AssertionError"): "unreachable: every candidate is one finishes() yields",
    ("diagnosis/sources.py", "AssertionError"): "unreachable: the retry loop returns or raises",
    ("sparse/__init__.py", "AttributeError"): "module __getattr__: Python's protocol",
    ("deploy/__init__.py", "AttributeError"): "module __getattr__: Python's protocol",
    ("cli/_job.py", "with_note"): "a failed job's error re-raised with the checkpoint's note",
    ("cli/_job.py", "error"): "a failed job's error (or the input change behind it), nothing kept",
    ("cli/_ray_engine.py", "_user_error"): "the error a Ray worker raised, unwrapped",
    ("backends/onnx.py", "error"): "cached_record's `error`: the caller's family class",
    ("cli/_chunk_args.py", "out"): "a chunking error recast as InputError (poolkit._errors.recast)",
    ("ray/_sources.py", "cause if isinstance(cause, Exception) else e"): "a Ray task's error",
}  # fmt: skip


def _trees() -> dict[str, ast.Module]:
    return {p.relative_to(SRC).as_posix(): ast.parse(p.read_text("utf-8"))
            for p in sorted(SRC.rglob("*.py"))}  # fmt: skip


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else ast.unparse(node)


def _family(trees: dict[str, ast.Module]) -> tuple[set[str], dict[str, str]]:
    """Class names in the family, and each helper's return annotation (by simple name)."""
    bases: dict[str, list[str]] = {}
    returns: dict[str, str] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [_name(b) for b in node.bases]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
                returns[node.name] = _name(node.returns).strip("'\"")

    def member(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "PoolkitError":
            return True
        return name not in seen and any(member(b, seen | {name}) for b in bases.get(name, []))

    return {n for n in bases if member(n)}, returns


def _outside_family() -> list[str]:
    trees = _trees()
    family, returns = _family(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue  # a bare `raise` re-raises what an except clause caught
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = _name(exc)
            if name in family or returns.get(name) in family or (path, name) in ALLOWED:
                continue
            found.append(f"src/poolkit/{path}:{node.lineno}: raise {ast.unparse(node.exc):.70}")
    return found


def test_every_raise_is_in_the_family():
    found = _outside_family()
    assert not found, "raised outside the PoolkitError family:\n" + "\n".join(found)


def test_the_allowlist_holds_only_sites_that_exist():
    """A stale entry would let a new raise of that kind through unseen."""
    trees = _trees()
    used = set()
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                used.add((path, _name(exc)))
    assert set(ALLOWED) - used == set()


def test_the_walker_sees_a_plain_raise(tmp_path, monkeypatch):
    """The check itself can fail: a bare ValueError in a module is reported."""
    copy = tmp_path / "poolkit"
    copy.mkdir()
    (copy / "errors.py").write_text((SRC / "errors.py").read_text("utf-8"), "utf-8")
    (copy / "bad.py").write_text(
        "from poolkit.errors import InputError\n"
        "def f(x):\n    if x:\n        raise InputError('fine')\n"
        "    raise ValueError('outside')\n",
        "utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "SRC", copy)
    assert _outside_family() == ["src/poolkit/bad.py:5: raise ValueError('outside')"]


def _raised(call) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    ("call", "builtin"),
    [
        (lambda: poolkit.embed(["a"], max_batch_tokens=0), ValueError),
        (lambda: poolkit.sequence_embedding(np.ones((1, 2, 3)), None, "avg"), ValueError),
        (lambda: poolkit.span_embeddings(np.ones((1, 2, 3)), np.zeros((1, 1, 2)), "mean"),
         TypeError),
        (lambda: poolkit.layer_mix([np.ones((1, 2, 3))] * 2, 1.5), TypeError),
        (lambda: poolkit.embed("one text, not a list"), TypeError),
        (lambda: poolkit.span_embeddings(np.ones((1, 2, 3)), np.array([[[0, 5]]]), "mean"),
         ValueError),
    ],
)  # fmt: skip
def test_raised_for_real_in_the_family(call, builtin):
    error = _raised(call)
    assert isinstance(error, poolkit.PoolkitError) and isinstance(error, builtin), type(error)


def test_disk_full_and_existing_outputs_are_in_the_family(tmp_path):
    from poolkit.io.atomic import AtomicDir, AtomicFile
    from poolkit.io.diskfull import DiskFullError, disk_full

    full = disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "f", 10)
    assert isinstance(full, DiskFullError) and isinstance(full, poolkit.PoolkitError)
    assert isinstance(full, OSError) and full.errno == errno.ENOSPC
    (tmp_path / "f").write_text("old", encoding="utf-8")
    out = AtomicFile(tmp_path / "f")
    out.file.write(b"new")
    error = _raised(lambda: out.commit(replace=False))
    assert isinstance(error, poolkit.OutputExistsError) and isinstance(error, FileExistsError)
    assert (tmp_path / "f").read_text(encoding="utf-8") == "old"
    error = _raised(lambda: AtomicDir(tmp_path / "f"))
    assert isinstance(error, poolkit.OutputExistsError) and isinstance(error, FileExistsError)
