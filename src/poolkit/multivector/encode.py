"""Token vectors of texts for a multi-vector recipe: the forward pass, the folder's query and
document sides, then the recipe's token pooling, dims, MUVERA and precision.

The sides follow the folder (:mod:`poolkit.multivector.folder`): prompt, length, query
expansion, skiplist and allowlist. Every other non-padding token is kept, special and
prompt tokens included, as sentence-transformers' ``MultiVectorEncoder`` keeps them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.driver import EmbedStats, to_float32_numpy
from poolkit.encoder import Encoder
from poolkit.head import Head, apply_head
from poolkit.multivector.folder import LateInteraction, read_late_interaction
from poolkit.multivector.muvera import muvera_encode
from poolkit.multivector.token_pooling import pool_tokens
from poolkit.output import quantize, truncate

__all__ = [
    "TokenBatch",
    "embed_multivector",
    "finish",
    "iter_token_vectors",
    "late_interaction",
    "side_length",
]


def late_interaction(encoder: Encoder) -> LateInteraction:
    """The encoder's :class:`LateInteraction`, read once per encoder."""
    cached = getattr(encoder, "_late_interaction", None)
    if cached is None:
        cached = read_late_interaction(encoder.info.path, encoder.tokenizer, encoder.max_length)
        encoder._late_interaction = cached  # type: ignore[attr-defined]
    return cached


@dataclass
class TokenBatch:
    """Token vectors of one forward batch: row ``j`` is text ``indices[j]``, its kept tokens'
    ``vectors[j]`` ``(n_j, D)`` float32 and character ``offsets[j]`` ``(n_j, 2)`` int64
    (``(0, 0)`` for special, prompt and expansion tokens)."""

    indices: np.ndarray
    vectors: list[np.ndarray]
    offsets: list[np.ndarray]
    truncated: np.ndarray


def side_length(late: LateInteraction, side: str, max_length: int) -> int:
    """Most tokens one sequence of ``side`` holds (the model's ``max_length`` unless the
    folder says a query or document length; query expansion sets or raises it)."""
    exp = late.expansion if side == "query" else None
    length = late.query_length if side == "query" else late.document_length
    cap = int(length) if length else max_length
    if exp is None:
        return cap
    return exp.length if exp.strategy == "fixed" else max(cap, exp.length)


def iter_token_vectors(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    side: str,
    prompt: str | None,
    normalize: bool,
    max_batch_tokens: int | None = None,
) -> Iterator[TokenBatch]:
    """The folder's token vectors of ``texts`` for ``side``, one :class:`TokenBatch` per
    forward batch (longest first), L2-normalised per token when ``normalize``."""
    late = late_interaction(encoder)
    cap = side_length(late, side, encoder.max_length)
    exp = late.expansion if side == "query" else None
    floor = exp.length if exp is not None else 0  # queries padded to the expansion length
    special = encoder.special_tokens
    prefix, suffix = list(special.prefix), list(special.suffix)
    room = cap - len(prefix) - len(suffix)
    tok = encoder.tokenize(list(texts), prompt=prompt)
    content = np.fromiter((len(x) for x in tok.ids), np.int64, count=len(tok))
    kept = np.minimum(content, max(room, 0))
    lengths = np.maximum(kept + len(prefix) + len(suffix), floor)
    order = np.argsort(-lengths, kind="stable")
    budget = max_batch_tokens or encoder.max_batch_tokens
    skip = np.asarray(late.skip_ids, np.int64)
    drop_skip = len(skip) and (side == "document" or late.skip_queries)
    left = encoder.pads_left and exp is None
    # The token-state cache (poolkit.state_cache) where the model sees only the real tokens:
    # not with a query expansion, whose padding tokens are scored.
    cache = getattr(encoder, "state_cache", None) if exp is None else None
    # Each text's ids as fed to the model: the template around its kept tokens.
    fed = [np.asarray([*prefix, *tok.ids[i][: kept[i]].tolist(), *suffix], np.int64)
           for i in range(len(tok))]  # fmt: skip
    if cache is not None:
        keys = cache.lookup(fed)
    start = 0
    while start < len(order):
        rows = order[start : start + max(1, budget // max(int(lengths[order[start]]), 1))]
        start += len(rows)
        width = int(lengths[rows].max())
        b = len(rows)
        ids = np.full((b, width), special.pad_id, np.int64)
        mask = np.zeros((b, width), np.int64)
        offsets = np.zeros((b, width, 2), np.int64)
        for j, i in enumerate(rows):
            seq = fed[i]
            at = width - len(seq) if left else 0
            ids[j, at : at + len(seq)] = seq
            mask[j, at : at + len(seq)] = 1
            offsets[j, at + len(prefix) : at + len(prefix) + kept[i]] = tok.offsets[i][: kept[i]]
        scored = mask.astype(bool)
        if exp is not None:
            extra = (mask == 0) & (np.arange(width) < exp.length)[None, :]
            ids[extra] = exp.token_id
            if exp.attend:
                mask[extra] = 1
            scored |= extra
        if drop_skip:
            scored &= ~np.isin(ids, skip)
        if late.keep_ids is not None and side == "document":  # the mask's allowlist
            scored &= np.isin(ids, np.asarray(late.keep_ids, np.int64))
        if cache is None:
            hidden = to_float32_numpy(encoder.backend.forward(encoder.model_inputs(ids, mask)))
        else:
            hidden = to_float32_numpy(cache.forward(
                encoder, {"input_ids": ids, "attention_mask": mask}, [keys[i] for i in rows],
                False, ("truncate", None),
                lambda every, ids=ids, mask=mask: encoder.backend.forward(
                    encoder.model_inputs(ids, mask), all_layers=every)))  # fmt: skip
        # the folder's projection, then L2 per token when normalize: (T, H) -> (T, D) float32
        flat = np.asarray(apply_head(Head(steps=late.steps), hidden[scored], normalize=normalize),
                          dtype=np.float32)  # fmt: skip
        cuts = np.cumsum(scored.sum(axis=1))[:-1]
        yield TokenBatch(rows.astype(np.int64), np.split(flat, cuts),
                         [offsets[j][scored[j]] for j in range(b)],
                         content[rows] > room)  # fmt: skip


def finish(vectors: np.ndarray, recipe: Any, side: str, normalize: bool) -> np.ndarray:
    """One text's token vectors ``(n, D)`` through the recipe's stages: token pooling
    (documents), dims (L2 again where the recipe normalises), MUVERA, precision."""
    if recipe.pool_factor is not None and side == "document":
        vectors = pool_tokens(vectors, recipe.pool_factor)
    if recipe.dims is not None:
        vectors = truncate(vectors, recipe.dims, normalize=normalize)
    if recipe.muvera is not None:
        one = muvera_encode(vectors, recipe.muvera, query=side == "query")[None, :]
        return quantize(one, recipe.precision, None)[0]
    return quantize(vectors, recipe.precision, None)


def embed_multivector(
    texts: Sequence[str],
    encoder: Encoder,
    recipe: Any,
    *,
    side: str,
    prompt: str | None,
    max_batch_tokens: int | None = None,
    progress: Callable[[int], None] | None = None,
    keep_offsets: bool = False,
) -> tuple[list[np.ndarray], list[np.ndarray], EmbedStats]:
    """``(vectors, offsets, stats)``: per text, in input order, the recipe's ``(tokens,
    dims)`` array (MUVERA: ``(dims,)``); with ``keep_offsets`` each text's token character
    offsets ``(n, 2)`` int64 into the text (half-open; ``(0, 0)`` for special, prompt and
    expansion tokens), row for row with its vectors, else an empty list; and the run's
    :class:`EmbedStats`. A recipe that merges tokens (``/poolF``) or folds them
    (``/muvera``) has no offsets per vector: refused."""
    if keep_offsets and (recipe.pool_factor is not None or recipe.muvera is not None):
        value_error("recipe", "one vector per token (no /poolF, no /muvera) for token offsets",
                    str(recipe), "A pooled vector spans merged tokens: drop the offsets.")  # fmt: skip
    began = time.perf_counter()
    late = late_interaction(encoder)
    normalize = recipe.resolved_normalize(late.normalize)
    out: list[Any] = [None] * len(texts)
    spans: list[Any] = [None] * len(texts) if keep_offsets else []
    stats = EmbedStats(num_texts=len(texts), max_length=side_length(late, side, encoder.max_length),
                       max_batch_tokens=max_batch_tokens or encoder.max_batch_tokens)  # fmt: skip
    for batch in iter_token_vectors(encoder, texts, side=side, prompt=prompt, normalize=normalize,
                                    max_batch_tokens=max_batch_tokens):  # fmt: skip
        for i, vec, where in zip(batch.indices, batch.vectors, batch.offsets, strict=True):
            out[i] = finish(vec, recipe, side, normalize)
            if keep_offsets:
                spans[i] = where
            stats.num_tokens += len(vec)
        stats.truncated.extend(int(i) for i in batch.indices[batch.truncated])
        if progress is not None:
            progress(len(batch.indices))
    stats.truncated.sort()
    stats.seconds = time.perf_counter() - began
    return out, spans, stats
