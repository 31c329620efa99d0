"""Quiet by default: poolkit's own lines are all a user sees on stderr.

Real subprocesses; stderr is not a terminal there, so poolkit draws no bar and prints only
its summary (and its own notes/warnings, all starting "poolkit: "). The ONNX run exports
a model into an empty cache, the path where transformers used to draw its loading bar.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import clitools
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def poolkit(*args: str, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    result = subprocess.run(clitools.command(*args), cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stderr.splitlines()


def test_embed_prints_only_its_summary(tmp_path):
    (tmp_path / "in.txt").write_text("one text\nanother text\n", encoding="utf-8")
    lines = poolkit("embed", "in.txt", "-o", "out.npy", cwd=tmp_path)
    assert len(lines) == 1 and lines[0].startswith("poolkit: 2 texts -> out.npy "), lines


def test_first_onnx_run_prints_only_its_summary(tmp_path, tiny_dirs):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    (tmp_path / "in.txt").write_text("one text\nanother text\n", encoding="utf-8")
    env = {**os.environ, "POOLKIT_CACHE": str(tmp_path / "cache")}
    model = str(tiny_dirs["bert_cls"])
    for quantize in ([], ["--quantize", "int8"]):  # int8 exports fp32 first: two loads
        out = f"out{len(quantize)}.npy"
        lines = poolkit("embed", "in.txt", "-o", out, "--model", model, "--backend", "onnx",
                        *quantize, cwd=tmp_path, env=env)  # fmt: skip
        assert len(lines) == 1 and lines[0].startswith(f"poolkit: 2 texts -> {out} "), lines
    assert any((tmp_path / "cache" / "onnx").iterdir())  # the export did run here


def test_bench_pooling_prints_no_warning(tmp_path):
    pytest.importorskip("sentence_transformers")
    result = subprocess.run(
        [sys.executable, "-W", "default", str(REPO / "bench" / "bench_pooling.py"),
         "--batch", "4", "--length", "8", "--hidden", "16", "--repeat", "1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "reference:" in result.stdout
