"""poolkit's imports show its layers (#51): no import cycle among its modules, and no import
against the layers of pyproject.toml's import-linter contract but those it lists under
ignore_imports. grimp reads every import, those inside functions included (importgraph.py);
``python tests/importgraph.py`` prints what these tests compare.
"""

from __future__ import annotations

import importgraph
import pytest

pytest.importorskip("grimp")  # with import-linter, in the test extra


@pytest.fixture(scope="module")
def graph():
    return importgraph.build()


# The cycles left, which may only go (none now: rank moved to compare/ranking.py, the
# built-in names to _names.py).
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycle_but_the_known_ones(graph):
    found = importgraph.cycles(graph)
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, f"an import cycle among poolkit's modules: {new}"
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"gone (or changed): take it off KNOWN_CYCLES: {gone}"


def test_only_the_listed_imports_run_against_the_layers(graph):
    """Every import from a lower layer up (or from one family into another) is one that
    the contract lists under ignore_imports, and each listed one still exists."""
    _, _, ignored = importgraph.layers()
    against = set(importgraph.against_layers(graph))
    assert against - ignored == set(), "imports against the layers (pyproject.toml)"
    assert ignored - against == set(), "listed under ignore_imports but gone: unlist them"


def test_the_version_has_one_home():
    import poolkit
    from poolkit._version import __version__
    from poolkit._versions import installed_versions

    assert poolkit.__version__ == __version__ == installed_versions()["poolkit"]


def test_moved_names_are_importable_where_they_were():
    from poolkit import bm25, deploy, embedding, encoder_cache
    from poolkit.backends import onnx
    from poolkit.compare import sparse_rows

    assert embedding.get_encoder is encoder_cache.get_encoder
    assert embedding.ModelRef is encoder_cache.ModelRef
    assert deploy.runtime_tokenizer is onnx.runtime_tokenizer
    assert sparse_rows.BM25 is bm25.BM25 and sparse_rows.parse_bm25 is bm25.parse_bm25
    assert "runtime_tokenizer" in deploy.__all__
