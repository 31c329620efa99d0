"""``poolkit embed --chunks`` on ``--engine ray``: each worker chunks and embeds its block of
documents with the local engine's :class:`~poolkit.cli._chunk_args.PartChunker`, and writes
one row per chunk, as the local engine does."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from poolkit.cli._chunk_args import ChunkPlan, PartChunker
from poolkit.errors import RunError
from poolkit.ray import Embedder

__all__ = ["ChunkEmbedder"]


class ChunkEmbedder(Embedder):
    """The Ray :class:`~poolkit.ray.Embedder` with ``--chunks``: a block of ``B`` documents
    (``id``, ``text_id``, ``text`` and the fields read beside them) in, one row per chunk
    out: the document's columns repeated, then ``chunk``, ``start``, ``end`` (``text`` with
    ``--chunk-text``) and the vectors. ``plan``: what ``poolkit embed``'s flags asked for."""

    def __init__(self, *args: Any, plan: ChunkPlan, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chunking = PartChunker(plan, self.encoder, self.recipes)

    def __call__(self, batch: Any) -> Any:
        """A ``pyarrow.Table`` block of consecutive row ids (a piece of one input file, as
        :meth:`poolkit.ray.Corpus.dataset` reads it)."""
        import pyarrow as pa

        texts = self._texts(batch)
        ids = batch.column("id").to_numpy()
        first = int(ids[0]) if len(ids) else 0
        if not np.array_equal(ids, first + np.arange(len(ids))):
            raise RunError(where="ChunkEmbedder", expected="consecutive row ids in a block",
                           got=f"ids from {first} that are not")  # fmt: skip
        # Messages name a document by its file and row, and its row id, as on one machine.
        where = [f"{t.rsplit(':', 1)[0]}: row {t.rsplit(':', 1)[1]}"
                 for t in batch.column("text_id").to_pylist()]  # fmt: skip
        part = self.chunking.chunk(SimpleNamespace(texts=texts, where=where), first)
        vectors, _ = self.chunking.embed(part, self.plan, progress=None)  # made on start
        doc_ids, columns = part.rows(self.chunking.with_text)
        out = batch.take(doc_ids - first)
        if not self.keep_text:
            out = out.drop_columns([self.text_column])
        at = out.column_names.index("text_id") + 1  # the chunk's columns, as one machine's
        for name, values in columns.items():
            out = out.add_column(at, name, pa.array(values, pa.string() if name == "text"
                                                    else pa.int64()))  # fmt: skip
            at += 1
        for name, column in self.plan.columns(vectors, self.widths):
            out = out.append_column(name, column)
        return out
