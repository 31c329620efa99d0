"""``poolkit embed --chunks SPEC``: each text of INPUT (a document) cut by a chunker of
:mod:`poolkit.chunkers` into chunks, one row each: ``id`` (the document's), ``chunk``,
``start``, ``end`` (``text[start:end]``), ``text`` (``--chunk-text``), then the vectors
(naive, or ``--late``). Each part's documents are chunked, embedded and committed together,
so ``--resume`` and ``-o -`` work the same; a document that gives no chunk is refused in
one line naming its input line and id.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit._version import __version__
from poolkit.chunkers import Chunker
from poolkit.errors import InputError

__all__ = ["ChunkPlan", "ChunkedPart", "PartChunker", "add_chunk_arguments", "check_chunk_flags"]

# The flags that mean something only with --chunks: (dest, flag).
_WITH_CHUNKS = (("late", "--late"), ("stride", "--stride"), ("chunk_text", "--chunk-text"))
# The extra columns of a chunk row, between `id` and the vectors.
COLUMNS = ("chunk", "start", "end")


def add_chunk_arguments(parser: argparse.ArgumentParser) -> None:
    """--chunks, --late, --stride, --chunk-text on ``poolkit embed``."""
    group = parser.add_argument_group("chunks (long documents: one row per chunk)")
    group.add_argument("--chunks", default=None, metavar="SPEC",
                       help="cut each text into chunks and write one row per chunk (id of "
                       "the document, chunk, start, end, vectors; .parquet, .jsonl, -o - or "
                       "--engine ray's shards): tokens:SIZE[:OVERLAP] (SIZE model tokens, "
                       "OVERLAP shared by neighbours), sentences, or column:NAME (each "
                       "record's [start, end] character spans in field NAME; not on Ray)")  # fmt: skip
    group.add_argument("--late", action="store_true",
                       help="with --chunks: late chunking, each chunk pooled from its whole "
                       "document's contextual token vectors (documents past the max length "
                       "in windows); without it each chunk's text is embedded alone")  # fmt: skip
    group.add_argument("--stride", type=int, default=None, metavar="N",
                       help="with --late: the step in tokens between the windows of a document "
                       "past the max length (default: half a window)")  # fmt: skip
    group.add_argument(
        "--chunk-text",
        action="store_true",
        help="with --chunks: also write each chunk's text (a text column)",
    )


@dataclass(frozen=True)
class ChunkPlan:
    """What --chunks, --late, --stride and --chunk-text ask for, resolved once from the
    flags (it pickles: ``--engine ray`` ships it to its workers)."""

    chunker: Chunker
    late: bool = False
    stride: int | None = None
    with_text: bool = False

    def settings(self) -> dict[str, Any]:
        """What the rows depend on beside embed's settings (the manifest)."""
        return {"chunker": str(self.chunker), "late": self.late, "stride": self.stride,
                "chunk_text": self.with_text}  # fmt: skip

    def metadata(self, record: dict[str, Any] | None) -> dict[str, Any]:
        """``record`` (the output stage's, or None) with the chunks' own entry."""
        out = dict(record) if record else {"poolkit": __version__}
        out["chunks"] = {
            **self.settings(),
            "columns": ["id", *COLUMNS, *(["text"] if self.with_text else [])],
            "id": "the document's row id in the input",
            "offsets": "character offsets into the document: text[start:end] is the chunk",
        }
        return out


def check_chunk_flags(args: argparse.Namespace) -> ChunkPlan | None:
    """What --chunks asks for (None without it), after the refusals that need no model:
    a flag of --chunks without it, a bad spelling, column:NAME on --engine ray, --stride
    without --late or below 1, --long-text window, a .npy OUTPUT."""
    from poolkit.cli._common import positive
    from poolkit.io.writers import output_format

    if args.chunks is None:
        given = [flag for dest, flag in _WITH_CHUNKS if getattr(args, dest) not in (None, False)]
        if given:
            raise InputError(f"{given[0]}: only with --chunks (one row per chunk of each text); "
                             f"add --chunks, e.g. --chunks tokens:128, or drop {given[0]}.")  # fmt: skip
        return None
    chunker = Chunker.parse(args.chunks)  # `chunks` in its message: --chunks when printed
    on_ray = getattr(args, "engine", "local") == "ray"  # OUTPUT: a folder of Parquet shards
    if on_ray and chunker.kind == "column":
        raise InputError(f"--chunks {chunker}: the spans of a field are read on one machine only; "
                         "use tokens:SIZE or sentences, or run without --engine ray.")  # fmt: skip
    if args.stride is not None and not args.late:
        raise InputError("--stride: the window step of late chunks; add --late, or drop --stride.")
    positive(args.stride, "--stride")
    if args.long_text != "truncate":
        raise InputError("--long-text window: with --chunks a chunk is embedded whole (a naive "
                         "chunk longer than the max length is cut and counted); for documents "
                         "past the limit read in windows use --late; drop --long-text.")  # fmt: skip
    if not on_ray and args.output != "-" and output_format(args.output) == "npy":
        raise InputError(f"{args.output}: --chunks writes one row per chunk with its document id "
                         "and span, which a .npy matrix cannot hold; write .parquet or .jsonl.")  # fmt: skip
    return ChunkPlan(chunker, bool(args.late), args.stride, bool(args.chunk_text))


@dataclass
class ChunkedPart:
    """One part's documents (input order), their row ids ``(n,)`` and ``(C_i, 2)`` spans."""

    documents: list[str]
    ids: np.ndarray
    spans: list[np.ndarray]

    def chunk_texts(self) -> list[str]:
        return [d[a:b] for d, s in zip(self.documents, self.spans, strict=True)
                for a, b in s.tolist()]  # fmt: skip

    def rows(self, with_text: bool) -> tuple[np.ndarray, dict[str, Any]]:
        """Each chunk's document id and the extra columns (chunk, start, end[, text])."""
        counts = [len(s) for s in self.spans]
        both = np.concatenate(self.spans) if self.spans else np.zeros((0, 2), np.int64)
        columns: dict[str, Any] = {
            "chunk": np.concatenate([np.arange(c, dtype=np.int64) for c in counts])
            if counts else np.zeros(0, np.int64),
            "start": both[:, 0].astype(np.int64),
            "end": both[:, 1].astype(np.int64),
        }  # fmt: skip
        if with_text:
            columns["text"] = self.chunk_texts()
        return np.repeat(self.ids.astype(np.int64), counts), columns


class PartChunker:
    """Chunks and embeds the parts of one ``poolkit embed --chunks`` job, on either engine
    (``--engine ray``: in each worker, from the values the driver resolved).

    Checks, once the model is loaded: no sparse recipe, a ``tokens:SIZE`` that fits the
    model, and recipes that pool a late chunk (no ``cls``/``last``)."""

    def __init__(self, plan: ChunkPlan, encoder: Any, recipes: dict[str, Any]) -> None:
        self.plan, self.encoder, self.recipes = plan, encoder, recipes
        chunker = self.chunker = plan.chunker
        self.late, self.stride, self.with_text = plan.late, plan.stride, plan.with_text
        self.column = chunker.column if chunker.kind == "column" else None
        if any(r.kind == "sparse" for r in recipes.values()):
            raise InputError("--chunks: sparse recipes (splade) embed whole texts for now; "
                             "drop --chunks, or use a dense recipe.")  # fmt: skip
        room = encoder.text_room
        if chunker.kind == "tokens" and (chunker.size or 0) > room:
            raise InputError(f"--chunks {chunker}: a chunk holds at most {room} tokens with this "
                             f"model (it reads {encoder.max_length}, "
                             f"{encoder.max_length - room} of them special); use tokens:{room} "
                             "or less.")  # fmt: skip
        if self.late:
            from poolkit.chunking import check_late

            try:
                check_late(recipes, True)
            except ValueError as e:
                from poolkit.cli._flags import LATE_CHUNKS, flagged

                raise flagged(e, LATE_CHUNKS) from None

    def digest(self, rows: Any) -> str:
        """SHA-256 of a part's texts, and of its spans with ``column:NAME``."""
        from poolkit.io.checkpoint import texts_digest

        if self.column is None:
            return texts_digest(rows.texts)
        spans = json.dumps(rows.values, sort_keys=True, default=str)
        return texts_digest([*rows.texts, spans])

    def chunk(self, rows: Any, first_id: int) -> ChunkedPart:
        """The chunks of a part (:class:`poolkit.io.readers.Rows`) whose first document has
        id ``first_id``. A document that gives no chunk (blank, or under ``tokens:`` no
        token of text) and bad spans are refused in one line naming the input row."""
        from poolkit._errors import recast
        from poolkit.chunking import chunk_documents
        from poolkit.embedding import check_inputs

        texts = rows.texts
        blank = next((i for i, t in enumerate(texts) if not t.strip()), None)
        if blank is not None:
            raise InputError(f"{rows.where[blank]} (id {first_id + blank}): an empty document "
                             "(empty or whitespace only) gives no chunk; remove it from INPUT.")  # fmt: skip
        docs = check_inputs(texts)
        if self.column is not None:
            source: Any = [self._spans_value(rows, i, first_id) for i in range(len(docs))]
        else:
            source = self.chunker
        try:
            spans = chunk_documents(docs, source, self.encoder)
        except (ValueError, TypeError) as e:
            # About chunks[i] or documents[i] (the part's i-th document): name its row and id.
            out = recast(e, InputError)
            at = (out.index,) if isinstance(out.index, int) else out.index
            if out.arg not in ("chunks", "documents") or not at:
                raise out from None
            i, rest = at[0], tuple(at[1:]) or None
            name = self.column if out.arg == "chunks" else "document"
            where = f"{rows.where[i]} (id {first_id + i})"
            raise out.but(arg=name, index=rest, where=where) from None
        return ChunkedPart(docs, first_id + np.arange(len(docs), dtype=np.int64), spans)

    def _spans_value(self, rows: Any, i: int, first_id: int) -> Any:
        value = rows.values[i]
        if not isinstance(value, str):
            return value
        try:  # csv/tsv hold text: the spans are written as JSON there
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise InputError(f"{rows.where[i]} (id {first_id + i}): {self.column!r} is not JSON "
                             f"({e.msg}); write the spans as a JSON list of [start, end] "
                             "pairs, e.g. [[0, 120], [121, 300]].") from None  # fmt: skip

    def embed(
        self, part: ChunkedPart, plan: Any, *, progress: Any = None
    ) -> tuple[dict[str, np.ndarray], Any]:
        """``{name: (sum C_i, D)}`` and the stats of a chunked part by ``plan`` (the job's
        one :class:`~poolkit.plan.Plan`; an empty part gives ``(0, 0)`` arrays)."""
        from poolkit.chunking import late_chunk_vectors, naive_chunk_vectors
        from poolkit.driver import EmbedStats

        if not part.documents:
            empty = {name: np.zeros((0, 0), np.float32) for name in self.recipes}
            return empty, EmbedStats(num_texts=0, max_length=self.encoder.max_length)
        if self.late:
            return late_chunk_vectors(part.documents, part.spans, self.encoder, plan,
                                      stride=self.stride, progress=progress)  # fmt: skip
        return naive_chunk_vectors(part.documents, part.spans, self.encoder, plan,
                                   progress=progress)  # fmt: skip

    def calibration_texts(self, part: ChunkedPart, limit: int) -> tuple[list[str], str]:
        """The int8/uint8 ranges' texts without --calibrate/--ranges: the first ``limit``
        chunks of the first part (what the vectors are made of), and their description."""
        texts, last = [], -1
        for doc, doc_id, spans in zip(part.documents, part.ids.tolist(), part.spans,
                                      strict=True):  # fmt: skip
            if len(texts) >= limit:
                break
            texts.extend(doc[a:b] for a, b in spans.tolist()[: limit - len(texts)])
            last = doc_id
        first = int(part.ids[0]) if len(part.ids) else 0
        return texts, f"the first {len(texts)} chunks of the input (documents {first}..{last})"
