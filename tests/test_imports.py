"""The package's import graph: no cycle, and no package reaching into another's privates.

Every ``import``/``from ... import`` of a ``poolkit`` module counts, including the ones
inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in modules and t != name)
        graph[name] = deps
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def test_no_import_cycle_between_modules():
    graph = _graph()
    # A package's __init__ re-exporting its submodules is not a cycle with them.
    edges = {m: {d for d in ds if not (m != "poolkit" and d.startswith(m + "."))}
             for m, ds in graph.items()}  # fmt: skip
    cycles = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges.get(m, ())):
            if d.startswith(m + ".") or m.startswith(d + "."):
                continue  # a package and its own submodules
            if state.get(d) == 1:
                cycles.append([*stack[stack.index(d) :], d] if d in stack else [m, d])
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert cycles == [], cycles


def test_no_package_imports_another_packages_private_modules():
    bad = []
    for module, deps in _graph().items():
        for dep in deps:
            private = [p for p in dep.split(".")[1:] if p.startswith("_") and p != "__init__"]
            if private and _package(dep) != _package(module) and dep.count(".") > 1:
                bad.append(f"{module} -> {dep}")
    assert bad == [], bad


def test_no_module_imports_private_names_of_another_package():
    """``from poolkit.x import _helper`` across packages: a private helper used elsewhere
    should be public where it lives."""
    bad = []
    for path in SRC.rglob("*.py"):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not node.module.startswith("poolkit") or _package(node.module) == _package(
                    module
                ):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{module}: from {node.module} import {alias.name}")
    assert bad == [], bad


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_attributes_defined(tree: ast.AST) -> set[str]:
    """Private attribute names a module defines: ``self._x = ...``, a class's ``_x = ...``
    and ``def _x``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _private(item.name):
                    names.add(item.name)
                targets = item.targets if isinstance(item, ast.Assign) else []
                if isinstance(item, ast.AnnAssign):
                    targets = [item.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and _private(node.attr):
                names.add(node.attr)
    return names


def _foreign_private_attributes(trees: dict[str, ast.AST]) -> list[str]:
    """``obj._x`` read in one package where ``_x`` is defined only in another package's
    modules (an Encoder's ``_prefix`` read by ``deploy``)."""
    defined: dict[str, set[str]] = {}
    for module, tree in trees.items():
        defined.setdefault(_package(module), set()).update(_private_attributes_defined(tree))
    bad = []
    for module, tree in trees.items():
        own = defined[_package(module)]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            owners = [p for p, names in defined.items() if node.attr in names]
            if node.attr not in own and owners:
                bad.append(f"{module}:{node.lineno} reads .{node.attr} of {', '.join(owners)}")
    return bad


def test_no_package_reads_another_packages_private_attributes():
    trees = {_module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in SRC.rglob("*.py")}
    assert _foreign_private_attributes(trees) == []


def test_the_private_attribute_check_can_fail():
    encoder = ast.parse("class Encoder:\n    def __init__(self):\n        self._prefix = [101]\n")
    deploy = ast.parse("def f(encoder):\n    return encoder._prefix\n")
    graph = ast.parse("class Graph:\n    _cache = {}\n")
    card = ast.parse("def g(graph):\n    return graph._cache\n")  # same package: fine
    trees = {"poolkit.encoder": encoder, "poolkit.deploy": deploy,
             "poolkit.deploy.graph": graph, "poolkit.deploy.card": card}  # fmt: skip
    assert _foreign_private_attributes(trees) == [
        "poolkit.deploy:2 reads ._prefix of poolkit.encoder"
    ]
