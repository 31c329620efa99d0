"""The embedded Qdrant shard (Qdrant Edge, the ``qdrant-edge-py`` package) under an index:
one named dense vector per recipe, cosine distance, points keyed by the UUIDv5 of the user's
id (:func:`poolkit.index.point_id`), the id and kept fields in the payload."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from poolkit.errors import InputError

__all__ = ["ID_NAMESPACE", "load_shard", "nearest", "open_shard", "point_id", "upsert"]

# The namespace of the points' UUIDv5 ids (fixed: the same id, the same point, in any run).
ID_NAMESPACE = uuid.UUID("6f1d9c52-2b7e-5d0a-9a4c-70d1c0b1e7a1")


def point_id(user_id: Any) -> str:
    """The Qdrant point id of a user's id (any int or text): UUIDv5 of its text."""
    return str(uuid.uuid5(ID_NAMESPACE, str(user_id)))


def _edge() -> Any:
    """The ``qdrant_edge`` module, or one line naming the extra that installs it."""
    try:
        import qdrant_edge
    except ImportError:
        from poolkit._errors import missing_extra
        from poolkit.errors import MissingDependencyError

        raise MissingDependencyError(missing_extra("a poolkit index", "qdrant-edge-py",
                                                   "index")) from None  # fmt: skip
    return qdrant_edge


def open_shard(path: Path, widths: Mapping[str, int]) -> Any:
    """The shard at ``path``: created with one cosine vector per name of ``widths``, or
    loaded (its vectors checked against them)."""
    q = _edge()
    config = q.EdgeConfig(vectors={name: q.EdgeVectorParams(size=int(d), distance=q.Distance.Cosine)
                                   for name, d in widths.items()})  # fmt: skip
    if (path / "edge_config.json").is_file():
        try:
            return q.EdgeShard.load(str(path), config)
        except Exception as e:  # the engine's own error: one line naming the folder
            raise InputError(where=path, expected="a shard with the index's vectors",
                             got=str(e).splitlines()[0][:120],
                             fix="Index into a new folder.") from None  # fmt: skip
    return q.EdgeShard.create(str(path), config)


def load_shard(path: Path) -> Any:
    """The shard at ``path``, as it is."""
    q = _edge()
    if not (path / "edge_config.json").is_file():
        raise InputError(where=path, expected="a Qdrant Edge shard", got="there is none",
                         fix="Build the index with poolkit index.")  # fmt: skip
    return q.EdgeShard.load(str(path))


def upsert(
    shard: Any,
    ids: Sequence[Any],
    vectors: Mapping[str, np.ndarray],
    kept: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Upsert one point per id: its vectors by name (float32 rows), payload ``id`` and, with
    ``kept``, ``keep`` (the fields passed through)."""
    q = _edge()
    points = []
    for k, user_id in enumerate(ids):
        payload: dict[str, Any] = {"id": user_id}
        if kept is not None:
            payload["keep"] = dict(kept[k])
        vector = {name: np.asarray(v[k], np.float32).tolist() for name, v in vectors.items()}
        points.append(q.Point(point_id(user_id), vector, payload))
    shard.update(q.UpdateOperation.upsert_points(points))


def nearest(
    shard: Any, name: str, queries: np.ndarray, k: int, exact: bool
) -> list[list[tuple[Any, float]]]:
    """The ``k`` nearest points of each query row by the vector ``name``: ``(user id,
    score)`` pairs, best first."""
    q = _edge()
    requests = [q.QueryRequest(limit=k, query=q.Query.Nearest(np.asarray(v, np.float32).tolist(),
                                                               using=name),
                               with_payload=True, params=q.SearchParams(exact=exact))
                for v in queries]  # fmt: skip
    found = shard.query_batch(q.QueryBatchRequest(requests)) if requests else []
    return [[(p.payload["id"], float(p.score)) for p in hits] for hits in found]
