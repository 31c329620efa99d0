"""BM25, the lexical baseline, as a row name: ``bm25``, ``bm25/k1=K/b=B`` (``bm25s.BM25``,
method lucene). ``compare --task retrieval`` scores it (:mod:`poolkit.compare.sparse_rows`);
``export`` reads its name in a compare result (it has no model to export).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poolkit._errors import value_error

__all__ = ["BM25", "parse_bm25"]


@dataclass(frozen=True)
class BM25:
    """A BM25 row: ``bm25s.BM25(k1=k1, b=b)`` (method lucene). Its name, ``bm25``, gains
    ``/k1=K`` and ``/b=B`` when they differ from the defaults."""

    k1: float = 1.5
    b: float = 0.75
    level = "lexical"
    kind = "lexical"
    layers = None
    precision = None
    dims = None
    has_output_stage = False

    def __str__(self) -> str:
        name = "bm25"
        if self.k1 != 1.5:
            name += f"/k1={self.k1:g}"
        if self.b != 0.75:
            name += f"/b={self.b:g}"
        return name

    @property
    def strategy(self) -> str:
        return str(self)


def parse_bm25(name: Any) -> BM25 | None:
    """The :class:`BM25` row named ``name`` (``bm25``, ``bm25/k1=1.2/b=0.5``), or ``None``
    for a name that is not BM25's."""
    if isinstance(name, BM25):
        return name
    if not isinstance(name, str) or name.strip().lower().split("/")[0] != "bm25":
        return None
    values = {"k1": 1.5, "b": 0.75}
    for seg in name.strip().lower().split("/")[1:]:
        key, _, raw = seg.partition("=")
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if key not in values or value < 0 or (key == "b" and value > 1):
            value_error("recipes", "bm25, optionally /k1=K (>= 0) and /b=B (0..1)", repr(name),
                        "e.g. bm25/k1=1.2/b=0.75.")  # fmt: skip
        values[key] = value
    return BM25(values["k1"], values["b"])
