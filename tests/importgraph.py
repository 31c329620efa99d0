"""poolkit's import graph as grimp reads it, imports inside functions included: its cycles
(strongly connected components) and its imports that run against the layers of
pyproject.toml's import-linter contract (the `layers` contract, its ignore_imports counted
too). tests/test_import_layers.py holds them to the list there; ``python
tests/importgraph.py`` prints them (``--src DIR`` reads another checkout's ``src``).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(src: Path | None = None):  # -> grimp.ImportGraph
    """The graph of package ``poolkit`` (from ``src`` when given), every import included."""
    import grimp

    if src is not None:
        sys.path.insert(0, str(src))
        for name in [m for m in sys.modules if m == "poolkit" or m.startswith("poolkit.")]:
            del sys.modules[name]
    return grimp.build_graph("poolkit", cache_dir=None)


def edges(graph) -> dict[str, set[str]]:
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of two or more modules, each sorted."""
    out = edges(graph)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(out):
        if root in index:
            continue
        # Tarjan's algorithm, iterative: (module, its imports not yet visited)
        work = [(root, iter(sorted(out[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            for nxt in todo:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(out[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def layers(pyproject: Path = ROOT / "pyproject.toml") -> tuple[list[list[str]], list[bool], set]:
    """The `layers` contract: each layer's modules (top first, full names), whether its
    members are independent, and its ignore_imports as (importer, imported) pairs."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c.get("id") == "layers")
    (container,) = contract["containers"]
    names, independent = [], []
    for layer in contract["layers"]:
        sep = "|" if "|" in layer else ":"
        names.append([f"{container}.{p.strip()}" for p in layer.split(sep)])
        independent.append(sep == "|")
    ignored = {tuple(s.strip() for s in i.split("->")) for i in contract.get("ignore_imports", [])}
    return names, independent, ignored


def against_layers(graph, pyproject: Path = ROOT / "pyproject.toml") -> list[tuple[str, str]]:
    """The imports from a lower layer to a higher one, or between two independent members
    of one layer (two families), ignore_imports included; an import of the package
    ``poolkit`` itself (which imports every layer) from inside it counts too."""
    names, independent, _ = layers(pyproject)

    def place(module: str) -> tuple[int, str] | None:
        for depth, layer in enumerate(names):  # depth 0 = the top
            for member in layer:
                if module == member or module.startswith(member + "."):
                    return depth, member
        return None

    out = []
    for a, targets in edges(graph).items():
        for b in targets:
            if b == "poolkit" and a != "poolkit":
                out.append((a, b))
                continue
            pa, pb = place(a), place(b)
            if pa is None or pb is None or pa[1] == pb[1]:
                continue
            if pb[0] < pa[0] or (pb[0] == pa[0] and independent[pa[0]]):
                out.append((a, b))
    return sorted(out)


def main(argv: list[str]) -> int:
    src = Path(argv[argv.index("--src") + 1]) if "--src" in argv else None
    graph = build(src)
    _, _, ignored = layers()
    n = sum(len(v) for v in edges(graph).values())
    found = cycles(graph)
    up = against_layers(graph)
    print(f"{len(graph.modules)} modules, {n} imports (module pairs, in functions included)")
    print(f"{len(found)} cycle(s): {sum(map(len, found))} modules")
    for comp in found:
        print(f"  {len(comp)}: {' '.join(comp)}")
    print(f"{len(up)} import(s) against the layers ({len(set(up) & ignored)} in ignore_imports)")
    for a, b in up:
        print(f"  {a} -> {b}{'  (ignored)' if (a, b) in ignored else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
