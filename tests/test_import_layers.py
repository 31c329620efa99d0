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


# Family names (#51): outside the families' own modules and their registry, code should ask
# the registry (poolkit.families), not compare a recipe's level or kind with a family name.
# The sites left, counted on the AST, may only go down (79 before the registry).
FAMILY_NAMES = {"dense", "sparse", "multivector", "lexical", "hybrid", "bm25"}
FAMILY_HOMES = ("sparse/", "multivector/", "families.py", "plan.py", "bm25.py")
FAMILY_NAME_SITES = 50


def _family_name_sites(source: str) -> int:
    """Comparisons (``==``, ``!=``, ``in``) and calls with a family name among their
    operands or arguments, in ``source``."""
    import ast

    def named(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in FAMILY_NAMES

    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            count += any(named(n) for n in ast.walk(node))
        elif isinstance(node, ast.Call):
            count += any(named(a) for a in node.args)
    return count


def test_the_counter_sees_each_form():
    code = (
        'if r.level == "sparse": pass\n'
        'x = r.kind in ("dense", "multivector")\n'
        'f("hybrid")\n'
        'y = r.level == "sequence"\n'
    )
    assert _family_name_sites(code) == 3


def test_family_names_are_compared_only_in_the_families():
    from pathlib import Path

    import poolkit

    root = Path(poolkit.__file__).parent
    sites = {
        rel: n
        for path in sorted(root.rglob("*.py"))
        if not (rel := path.relative_to(root).as_posix()).startswith(FAMILY_HOMES)
        and (n := _family_name_sites(path.read_text(encoding="utf-8")))
    }
    total = sum(sites.values())
    assert total <= FAMILY_NAME_SITES, f"{total} sites (was {FAMILY_NAME_SITES}): {sites}"
    assert total >= FAMILY_NAME_SITES, f"down to {total}: lower FAMILY_NAME_SITES to it"
