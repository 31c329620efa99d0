"""Running the real `poolkit` command in tests: one subprocess helper, one error-line check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def poolkit(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """``python -m poolkit.cli ARGS`` in ``cwd`` (this interpreter, this PYTHONPATH)."""
    return subprocess.run(
        [sys.executable, "-m", "poolkit.cli", *args],
        cwd=cwd, input=stdin, capture_output=True, timeout=300,
    )  # fmt: skip


def one_error_line(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """Check the run failed with ``code`` and one ``poolkit: error:`` line holding every
    fragment (no traceback); returns the line."""
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("poolkit: error: ")
    for fragment in fragments:
        assert fragment in err, err
    return err
