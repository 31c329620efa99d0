"""Inference-free sparse models: a sentence-transformers ``SparseEncoder`` folder whose one
module is a ``Router`` with a ``query`` and a ``document`` route.

The document route is a masked-LM transformer and ``SpladePooling`` (the usual SPLADE
path); the query route is a ``SparseStaticEmbedding``, one stored weight per vocabulary
term and no forward pass (OpenSearch's inference-free models are built this way). The
folder keeps each route's modules in subfolders named in ``router_config.json``::

    modules.json                    [Router at path ""]
    router_config.json              {"structure": {"query": [...], "document": [...]}, ...}
    query_0_SparseStaticEmbedding/  model.safetensors ("weight" (V,)), tokenizer files
    document_0_MLMTransformer/      config.json, weights, tokenizer files
    document_1_SpladePooling/       config.json

poolkit runs the document route's transformer folder (:func:`read_routes` finds it) and
embeds queries with the static weights (:mod:`poolkit.sparse.static`). Only this shape is
read; any other Router is refused in one line naming what it holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poolkit.errors import InputError

__all__ = ["Routes", "read_routes", "routes_of"]

_ROUTER = "Router"
_STATIC = "SparseStaticEmbedding"
_POOLING = "SpladePooling"
_MLM = frozenset({"MLMTransformer", "Transformer"})


@dataclass(frozen=True)
class Routes:
    """The routes of an inference-free sparse model folder.

    Attributes:
        root: the folder (``modules.json``, ``router_config.json``).
        document: the document route's masked-LM transformer folder (what poolkit runs).
        pooling: the document route's ``SpladePooling`` subfolder name.
        query: the query route's ``SparseStaticEmbedding`` folder.
    """

    root: Path
    document: Path
    pooling: str
    query: Path


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(where=path, expected="a readable JSON file", got=f"it is not ({e})",
                         fix="Fix or remove the file.") from e  # fmt: skip


def _refuse(root: Path, what: str) -> Any:
    raise InputError(where=root, expected=f"a sentence-transformers Router with a 'query' "
                     f"route of one {_STATIC} and a 'document' route of a masked-LM "
                     f"transformer and {_POOLING} (an inference-free SparseEncoder)",
                     got=f"its {what}", fix="Save the document route's modules as a "
                     "SparseEncoder of its own to embed with it.")  # fmt: skip


def read_routes(root: str | Path) -> Routes | None:
    """The :class:`Routes` of folder ``root``, or ``None`` when its ``modules.json`` is not
    one ``Router`` (or it has none).

    Raises:
        InputError: a Router poolkit does not read (other routes, other modules, route
            mappings), or a ``router_config.json`` that is missing or unreadable.
    """
    root = Path(root)
    modules_path = root / "modules.json"
    if not modules_path.is_file():
        return None
    modules = _json(modules_path)
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    if _ROUTER not in kinds:
        return None
    if len(kinds) != 1:
        _refuse(root, f"pipeline has modules after it ({', '.join(kinds)})")
    base = root / str(modules[0].get("path") or "")
    config_path = base / "router_config.json"
    if not config_path.is_file():
        _refuse(root, f"{config_path.name} is missing")
    config = _json(config_path)
    types = {str(k): str(v).rsplit(".", 1)[-1] for k, v in (config.get("types") or {}).items()}
    structure = {str(k): [str(x) for x in v] for k, v in (config.get("structure") or {}).items()}
    if (config.get("parameters") or {}).get("route_mappings"):
        _refuse(root, "routes are chosen by route_mappings")
    if sorted(structure) != ["document", "query"]:
        _refuse(root, f"routes are {', '.join(map(repr, structure)) or 'none'}")
    query = [types.get(m) for m in structure["query"]]
    if query != [_STATIC]:
        _refuse(root, f"query route is {' + '.join(map(str, query)) or 'empty'}")
    document = [types.get(m) for m in structure["document"]]
    if len(document) != 2 or document[0] not in _MLM or document[1] != _POOLING:
        _refuse(root, f"document route is {' + '.join(map(str, document)) or 'empty'}")
    return Routes(root=base, document=base / structure["document"][0],
                  pooling=structure["document"][1], query=base / structure["query"][0])  # fmt: skip


def routes_of(path: str | Path) -> Routes | None:
    """The :class:`Routes` whose document transformer is folder ``path`` (the folder
    :func:`poolkit.model_folder.resolve_model` gives for an inference-free model), else
    ``None``."""
    path = Path(path)
    parent = path.parent
    if not (parent / "router_config.json").is_file() or not (parent / "modules.json").is_file():
        return None
    routes = read_routes(parent)
    if routes is None or routes.document.resolve() != path.resolve():
        return None
    return routes
