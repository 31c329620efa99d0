"""The README's Python examples run as written, and its first commands stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_python_blocks_run(code):
    exec(compile(code, str(README), "exec"), {})


def test_readme_starts_with_install_and_test_commands():
    first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1).splitlines()
    assert "poolkit embed" in first[0] and "pip install" in first[0]
    ci = (README.parent / ".ci" / "run").read_text()
    test_command = first[1].split("&&")[-1].strip()
    assert test_command in ci, f"CI must run the README's test command: {test_command}"
