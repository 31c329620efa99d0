"""Running the real `poolkit` command in tests: the command line, one subprocess helper, a
``poolkit`` script for shell commands, one error-line check.

Each command is its own process, forked from a warm one that has imported torch and
transformers (``warmcli``: about 0.1 s to start instead of 10 on 2 cores). A test that
kills a command with SIGKILL starts it fresh (``warmcli.FRESH``): the command must die
with its process, not a moment after.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import warmcli


def command(*args: str) -> list[str]:
    """The argv that runs ``poolkit ARGS`` (warm; fresh where ``warmcli`` says)."""
    return [*warmcli.command(), *args]


def fresh(argv: list[str]) -> list[str]:
    """``argv`` from ``command()`` started as a fresh interpreter instead (a test that kills
    it with SIGKILL, or times its start)."""
    warm = warmcli.command()
    assert argv[: len(warm)] == warm, argv
    return [*warmcli.FRESH, *argv[len(warm) :]]


def to_signal(argv: list[str], sig: int) -> list[str]:
    """``argv`` from ``command()`` as started for a test that sends it ``sig``: fresh for
    SIGKILL (the client cannot pass that on), warm otherwise."""
    return fresh(argv) if sig == signal.SIGKILL else argv


def poolkit(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """``poolkit ARGS`` in ``cwd`` (this interpreter, this PYTHONPATH)."""
    return subprocess.run(command(*args), cwd=cwd, input=stdin, capture_output=True, timeout=300)


@cache
def bin_dir() -> Path:
    """A folder whose ``poolkit`` runs as ``command()`` does: put it first on ``PATH`` for a
    shell command line."""
    folder = Path(tempfile.mkdtemp(prefix="poolkit-bin-"))
    script = folder / "poolkit"
    line = " ".join(f"'{part}'" for part in warmcli.command())
    script.write_text(f'#!/bin/sh\nexec {line} "$@"\n', encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def with_poolkit_on_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``bin_dir()`` first on ``PATH``."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = f"{bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    return env


def one_error_line(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """Check the run failed with ``code`` and one ``poolkit: error:`` line holding every
    fragment (no traceback); returns the line."""
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("poolkit: error: ")
    for fragment in fragments:
        assert fragment in err, err
    return err
