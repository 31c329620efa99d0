"""Start-up: ``poolkit embed --backend onnx`` with a cached export imports neither torch nor
transformers, and gives the torch backend's vectors.

The real CLI runs in a subprocess with its own ``POOLKIT_CACHE``: a first run exports the
model and resolves the tokenizer (both cached), a second run goes through a wrapper that
records, at exit, whether ``torch`` or ``transformers`` was ever imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

# Runs poolkit.cli as `python -m` would, then reports which heavy modules were imported.
WRAPPER = """
import atexit, runpy, sys
atexit.register(lambda: print("IMPORTED", sorted(
    m for m in ("torch", "transformers") if m in sys.modules), file=sys.stderr))
sys.argv = ["poolkit", *sys.argv[1:]]
runpy.run_module("poolkit.cli", run_name="__main__")
"""


def _run(args, env):
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *args], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_cached_onnx_cli_imports_no_torch(tmp_path, minilm_dir):
    src = tmp_path / "two.txt"
    src.write_text("A man is playing a guitar.\nA dog runs through the park.\n", encoding="utf-8")
    env = {**os.environ, "POOLKIT_CACHE": str(tmp_path / "cache")}
    embed = ["embed", str(src), "--model", str(minilm_dir), "--quiet"]
    first = _run([*embed, "-o", str(tmp_path / "a.npy"), "--backend", "onnx"], env)
    assert first == "IMPORTED ['torch', 'transformers']"  # exporting needs both, once
    again = _run([*embed, "-o", str(tmp_path / "b.npy"), "--backend", "onnx"], env)
    assert again == "IMPORTED []"
    ref = _run([*embed, "-o", str(tmp_path / "t.npy"), "--backend", "torch"], env)
    assert ref == "IMPORTED ['torch', 'transformers']"
    got, want = np.load(tmp_path / "b.npy"), np.load(tmp_path / "t.npy")
    assert got.shape == want.shape == (2, 384)
    assert float(np.abs(got - want).max()) < 1e-5
    np.testing.assert_array_equal(got, np.load(tmp_path / "a.npy"))
