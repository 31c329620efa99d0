"""Long documents as chunk vectors: ``embed_chunks``, naive or late.

A chunker (:mod:`poolkit.chunkers`) cuts each document into character spans; each chunk
then becomes one vector in one of two ways, one parameter apart:

- **naive** (``late=False``): each chunk's text ``document[start:end]`` is encoded alone,
  exactly as :func:`poolkit.embed` (and ``SentenceTransformer.encode``) encode a text.
- **late** (``late=True``): the whole document goes through the encoder once and each chunk
  pools the document's *contextual* token vectors that overlap its characters. Documents
  past the model's limit run in overlapping windows, each token taken from the window
  where it sits furthest from an edge (``long_text="window"``; ``stride`` sets the step,
  half a window by default). The recipe's sequence strategy (``mean``, ``max``, ...,
  layers, the model's modules after pooling, normalisation, output stage) applies to the
  chunk's tokens; a chunk holds no [CLS]/[SEP], so ``cls`` and ``last``, which name one
  of the sequence's own tokens, are refused, and ``_no_special`` changes nothing unless
  the text itself types special tokens. A prompt goes before the document, outside every
  chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

import numpy as np

from poolkit._errors import value_error
from poolkit.chunkers import Chunker, check_spans, sentence_spans, token_spans
from poolkit.driver import EmbedStats, user_tokens, warn_truncated
from poolkit.embedding import (
    EmbedOptions,
    ModelRef,
    char_to_token_spans,
    resolve_request,
    run_options,
)
from poolkit.encoder import EncodedBatch, Encoder
from poolkit.plan import Plan, make_plan
from poolkit.recipe import Recipe

__all__ = ["DocumentChunks", "check_late", "chunk_documents", "embed_chunks"]

# Documents handed to one plan run on the naive path (progress and memory).
_NAIVE_GROUP = 64


@dataclass(frozen=True)
class DocumentChunks:
    """One document's chunks.

    Attributes:
        spans: ``(C, 2)`` int64 half-open character spans: chunk ``k`` is
            ``document[spans[k, 0]:spans[k, 1]]``.
        vectors: ``(C, D)`` (float32 unless the recipe names a precision), or a dict
            name -> ``(C, D_name)`` when a list of recipes was asked for.
    """

    spans: np.ndarray
    vectors: Any

    def texts(self, document: str) -> list[str]:
        """The chunks' texts, cut from ``document``."""
        return [document[a:b] for a, b in self.spans.tolist()]


def chunk_documents(
    documents: Sequence[str],
    chunks: Chunker | str | Sequence[Any],
    encoder: Encoder,
) -> list[np.ndarray]:
    """Every document's chunk spans, ``(C_i, 2)`` int64 each, checked.

    ``chunks`` is a chunker or its spelling (``"tokens:128"``, ``"tokens:256:32"``,
    ``"sentences"``), or the user's spans: one list of ``(start, end)`` pairs per document.
    Token counts use ``encoder``'s tokenizer; ``SIZE`` may be at most its text room
    (``max_length`` less the special tokens).

    Raises:
        InputError: a chunk size out of range, spans outside a document, out of order or
            overlapping, or a document that gives no chunk (empty or whitespace only).
    """
    if isinstance(chunks, Chunker | str):
        chunker = Chunker.parse(chunks)
        if chunker.kind == "column":
            value_error("chunks", "per-document spans for column:NAME", str(chunker),
                        "The library takes the span lists themselves: chunks=[[(0, 10), ...], ...].")  # fmt: skip
        if chunker.kind == "tokens":
            check_size(encoder, chunker.size)
            tok = encoder.tokenize(documents)
            spans = [token_spans(doc, tok.offsets[i], chunker.size or 1, chunker.overlap,
                                 tok.word_ids[i]) for i, doc in enumerate(documents)]  # fmt: skip
        else:
            spans = [sentence_spans(doc) for doc in documents]
    else:
        if isinstance(chunks, np.ndarray | str) or not isinstance(chunks, Sequence):
            value_error("chunks", "a chunker name or one list of spans per document",
                        type(chunks).__name__)  # fmt: skip
        if len(chunks) != len(documents):
            value_error("chunks", f"one list of spans per document ({len(documents)})",
                        len(chunks))  # fmt: skip
        spans = [check_spans(doc, s, "chunks", (i,)) for i, (doc, s) in
                 enumerate(zip(documents, chunks, strict=True))]  # fmt: skip
    for i, s in enumerate(spans):
        if not len(s):
            value_error("documents", "a document with text to chunk",
                        f"{documents[i]!r:.40} (no chunk)", "Remove it or give it some text.",
                        index=i)  # fmt: skip
    return spans


def embed_chunks(
    documents: Sequence[str],
    chunks: Chunker | str | Sequence[Any] = "tokens:128",
    model: ModelRef = None,
    recipe: Recipe | str | Sequence[Recipe | str] | None = None,
    *,
    late: bool = False,
    stride: int | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    calibration: Any = None,
    return_stats: bool = False,
    progress: Callable[[int], None] | None = None,
    **options: Unpack[EmbedOptions],
) -> Any:
    """Per document, its chunks' spans and vectors.

    Args:
        documents: ``N`` strings, each with some text.
        chunks: where to cut (see :mod:`poolkit.chunkers`): ``"tokens:SIZE[:OVERLAP]"``
            (default ``"tokens:128"``), ``"sentences"``, a :class:`~poolkit.chunkers.Chunker`,
            or one list of ``(start, end)`` character spans per document.
        late: ``False`` encodes each chunk's text alone (naive chunking); ``True`` pools
            each chunk from its document's contextual token vectors (late chunking).
        stride: window step in tokens for late chunks of documents past the model's
            limit (default: half a window); refused with ``late=False``.
        recipe: as for :func:`poolkit.embed`, applied to each chunk, as are
            ``prompt_name``, ``prompt``, ``calibration`` and ``**options``.
        return_stats: also return an :class:`EmbedStats` (``num_texts`` counts documents;
            ``truncated`` lists the documents with a naive chunk cut at the max length).
        progress: called with the number of documents finished.

    Returns:
        ``N`` :class:`DocumentChunks` in input order (then the stats with
        ``return_stats``).

    Raises:
        InputError: a bad chunker or spans (:func:`chunk_documents`), ``cls``/``last`` with
            ``late=True``, or any argument :func:`poolkit.embed` refuses.
    """
    recipe, opts = run_options("embed_chunks", "sequence", recipe, options, model)
    req = resolve_request("sequence", documents, model, recipe, prompt_name=prompt_name,
                          prompt=prompt, calibration=calibration,
                          check=lambda docs: _check_chunking(docs, chunks, late, stride),
                          refuse=lambda recipes: check_late(recipes, late), **opts)  # fmt: skip
    spans = chunk_documents(req.inputs, req.checked, req.encoder)
    plan = make_plan(req.encoder, req.recipes, prompt_name=prompt_name, prompt=prompt,
                     pipeline=opts["pipeline"], calibration=req.ranges)  # fmt: skip
    run = {"max_batch_tokens": opts["max_batch_tokens"], "progress": progress}
    if late:
        flat, stats = late_chunk_vectors(req.inputs, spans, req.encoder, plan, stride=stride,
                                         **run)  # fmt: skip
    else:
        flat, stats = naive_chunk_vectors(req.inputs, spans, req.encoder, plan, **run)
        warn_truncated(stats, "documents (a chunk of each)")
    cuts = np.cumsum([len(s) for s in spans])[:-1]
    per_name = {name: np.split(v, cuts) for name, v in flat.items()}
    out = []
    for i, s in enumerate(spans):
        vectors = {name: parts[i] for name, parts in per_name.items()}
        out.append(DocumentChunks(s, vectors if req.as_dict else next(iter(vectors.values()))))
    return (out, stats) if return_stats else out


def _check_chunking(documents: list[str], chunks: Any, late: Any, stride: Any) -> Any:
    """``chunks`` (a spelling parsed), ``late`` and ``stride`` checked, and every document
    given some text, before the model loads."""
    for i, doc in enumerate(documents):
        if not doc.strip():
            value_error("documents", "a document with text to chunk",
                        f"{doc!r:.40}", "Remove it or give it some text.", index=i)  # fmt: skip
    if not isinstance(chunks, Chunker | Sequence):
        value_error("chunks", "a chunker name or one list of spans per document",
                    type(chunks).__name__)  # fmt: skip
    if isinstance(chunks, str):
        chunks = Chunker.parse(chunks)
    if not isinstance(late, bool):
        value_error("late", "True or False", repr(late))
    if stride is not None and not late:
        value_error("stride", "None with late=False", stride,
                    "The window step applies to late chunks only.")  # fmt: skip
    if stride is not None and (
        isinstance(stride, bool) or not isinstance(stride, int) or stride < 1
    ):
        value_error("stride", "a positive number of tokens", repr(stride))
    return chunks


def positional_parts(recipe: Recipe) -> list[str]:
    """The strategies of ``recipe`` that name one token of the whole sequence (``cls``,
    ``last``): a late chunk has no such token of its own."""
    return [s for s, _ in recipe.parts if s in ("cls", "last")]


def check_size(encoder: Encoder, size: int | None, arg: str = "chunks") -> None:
    """A chunk of ``size`` tokens fits one of ``encoder``'s sequences: at most its text room
    (the max length less the special tokens); ``arg`` names the argument."""
    room = encoder.text_room
    if size is not None and not 1 <= size <= room:
        special = encoder.max_length - room
        value_error(arg, f"a chunk size from 1 to {room} tokens (the model reads "
                    f"{encoder.max_length}, {special} of them special)", size,
                    f"e.g. tokens:{min(room, 128)}.")  # fmt: skip


def check_late(recipes: Mapping[str, Recipe], late: bool) -> None:
    """With ``late``: refuse a recipe whose strategy names one token of the sequence
    (``cls``, ``last``), which a late chunk does not have."""
    if not late:
        return
    for name, r in recipes.items():
        bad = positional_parts(r)
        if bad:
            value_error("recipe", "a strategy that pools a late chunk's tokens (mean, max, ...)",
                        f"{name!r}, whose {bad[0]!r} names one token of the whole sequence",
                        "A late chunk has no [CLS] or last token of its own: use mean or max, "
                        "or `late=False`.")  # fmt: skip


def naive_chunk_vectors(
    documents: list[str],
    spans: list[np.ndarray],
    encoder: Encoder,
    plan: Plan,
    *,
    progress: Callable[[int], None] | None = None,
    max_batch_tokens: int | None = None,
) -> tuple[dict[str, np.ndarray], EmbedStats]:
    """Naive chunk vectors: ``{name: (sum C_i, D)}`` in document then chunk order.

    Each chunk text is embedded by ``plan`` (the caller's one resolution of the recipes;
    truncated at the max length where a chunk is longer), ``_NAIVE_GROUP`` documents at a
    time."""
    stats = EmbedStats(num_texts=len(documents), max_length=encoder.max_length)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in plan.recipes}
    for g in range(0, max(len(documents), 1), _NAIVE_GROUP):  # none: (0, D) arrays
        docs = range(g, min(g + _NAIVE_GROUP, len(documents)))
        texts = [documents[i][a:b] for i in docs for a, b in spans[i].tolist()]
        owner = np.repeat(np.asarray(docs, np.int64), [len(spans[i]) for i in docs])
        vecs, s = plan.run(encoder, texts, long_text="truncate", max_batch_tokens=max_batch_tokens)
        for name, v in vecs.items():
            parts[name].append(v)
        stats.num_tokens += s.num_tokens
        stats.truncated.extend(sorted({int(owner[k]) for k in s.truncated}))
        stats.max_batch_tokens, stats.dims, stats.calibration = (
            s.max_batch_tokens, s.dims, s.calibration)  # fmt: skip
        stats.seconds += s.seconds
        if progress is not None:
            progress(len(docs))
    return {name: np.concatenate(p) for name, p in parts.items()}, stats


@dataclass
class _ChunkRows:
    """Chunks of one batch as rows of their own, for :func:`sequence_vectors`: each row
    holds one chunk's run of tokens (``(K, Lc, H)`` views gathered from the documents'
    rows, padded at the end), the masks to match, and the document index per row."""

    indices: np.ndarray
    attention_mask: np.ndarray
    special_tokens_mask: np.ndarray
    hidden: Any
    hidden_states: tuple[Any, ...] | None
    pool_mask: None = None


def _gather(h: Any, flat: np.ndarray, shape: tuple[int, int]) -> Any:
    """Rows ``flat`` of ``h`` flattened to ``(B * L, H)``, shaped ``(*shape, H)``."""
    if hasattr(h, "index_select"):
        import torch

        idx = torch.from_numpy(flat.reshape(-1)).to(h.device)
        return h.reshape(-1, h.shape[-1]).index_select(0, idx).reshape(*shape, -1)
    arr = np.asarray(h)
    return arr.reshape(-1, arr.shape[-1])[flat.reshape(-1)].reshape(*shape, -1)


def chunk_rows(batch: EncodedBatch, token_spans: list[np.ndarray]) -> _ChunkRows:
    """One row per chunk of ``batch``: ``token_spans[j]`` holds row ``j``'s chunks as
    inclusive ``(C_j, 2)`` token positions ``[first, last]`` in that row."""
    rows = np.repeat(np.arange(len(token_spans)), [len(s) for s in token_spans])
    both = np.concatenate(token_spans).reshape(-1, 2)
    first, size = both[:, 0], both[:, 1] - both[:, 0] + 1
    width = int(size.max())
    steps = np.arange(width)
    mask = steps[None, :] < size[:, None]
    # Padding positions point at the chunk's first token (gathered, then masked out).
    pos = first[:, None] + np.where(mask, steps[None, :], 0)
    flat = rows[:, None] * batch.attention_mask.shape[1] + pos
    shape = (len(rows), width)
    hs = batch.hidden_states
    layers = None if hs is None else tuple(_gather(h, flat, shape) for h in hs)
    return _ChunkRows(
        indices=batch.indices[rows],
        attention_mask=mask.astype(np.int64),
        special_tokens_mask=batch.special_tokens_mask[rows[:, None], pos] & mask,
        hidden=layers[-1] if layers is not None else _gather(batch.hidden, flat, shape),
        hidden_states=layers,
    )


def late_chunk_vectors(
    documents: list[str],
    spans: list[np.ndarray],
    encoder: Encoder,
    plan: Plan,
    *,
    stride: int | None = None,
    progress: Callable[[int], None] | None = None,
    max_batch_tokens: int | None = None,
) -> tuple[dict[str, np.ndarray], EmbedStats]:
    """Late chunk vectors (see the module docstring): ``{name: (sum C_i, D)}`` in document
    then chunk order, by ``plan`` (the caller's one resolution of the recipes) with each
    chunk a row of its own (the document's tokens that overlap its characters; prompt and
    special tokens never do), each document whole through windows."""
    starts = np.concatenate([[0], np.cumsum([len(s) for s in spans])])

    def rows(batch: EncodedBatch) -> tuple[_ChunkRows, np.ndarray]:
        valid = user_tokens(batch)
        token_spans = [char_to_token_spans(batch.offsets[j], valid[j], spans[i], row=int(i))
                       for j, i in enumerate(batch.indices)]  # fmt: skip
        at = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in batch.indices])
        return chunk_rows(batch, token_spans), at

    return plan.run(encoder, documents, long_text="window", stride=stride, rows=rows,
                    num_rows=int(starts[-1]), progress=progress,
                    max_batch_tokens=max_batch_tokens)  # fmt: skip
