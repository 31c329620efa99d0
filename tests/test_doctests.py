"""The examples in the docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["poolkit.sequence", "poolkit.spans", "poolkit.words", "poolkit.tokens", "poolkit.nn"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
